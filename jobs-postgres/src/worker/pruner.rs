//! The periodic loop around [`Retention::run_once`]: every worker deletes done and cancelled
//! jobs past their retention age, one process at a time (the others find the lock taken and
//! skip their turn).
//!
//! It stops as soon as the worker stops, even in the middle of a statement: an interrupted
//! batch is rolled back and the next run, by this worker or another, does it.

use std::sync::Arc;
use std::time::Duration;

use super::Shared;
use crate::admin::Retention;

/// Runs retention until the worker stops, if the worker's settings enable it.
pub async fn pruner(shared: Arc<Shared>) {
    let Some(config) = shared.config.retention.clone() else {
        return;
    };
    let retention = match Retention::new(shared.pool.clone(), config) {
        Ok(retention) => retention,
        Err(error) => {
            // Settings are validated when the worker is built; this is only a safety net.
            tracing::error!(%error, "retention disabled");
            return;
        }
    };
    let interval = retention.config().interval;
    let mut stop = shared.stopped.subscribe();
    loop {
        let outcome = tokio::select! {
            outcome = retention.run_once() => outcome,
            _ = stop.wait_for(|stopped| *stopped) => return,
        };
        let pause = match outcome {
            Ok(report) if report.more => Duration::ZERO,
            Ok(_) => interval,
            Err(error) => {
                tracing::warn!(%error, "deleting finished jobs failed; will retry");
                interval
            }
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
    }
}
