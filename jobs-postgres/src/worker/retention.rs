//! Retention, as a worker runs it: every worker deletes done and cancelled jobs past their
//! retention age, one process at a time (the others find the lock taken and skip their turn).
//! The deleting itself is [`Retention::run_once`].
//!
//! It stops as soon as the worker stops, even in the middle of a statement: an interrupted
//! batch is rolled back and the next run, by this worker or another, does it.

use std::future::Future;
use std::time::Duration;

use sqlx::PgPool;

use crate::admin::{Retention, RetentionConfig};
use crate::periodic::{run_periodically, OnStop, PeriodicService};

/// Runs retention with `config` on `pool` until `stop` resolves: a batch at once, the next at
/// once while batches come back full, else after the configured interval.
pub(crate) async fn run_retention(
    pool: PgPool,
    config: RetentionConfig,
    stop: impl Future<Output = ()>,
) {
    let retention = match Retention::new(pool, config) {
        Ok(retention) => retention,
        Err(error) => {
            // Settings are validated when the worker is built; this is only a safety net.
            tracing::error!(%error, "retention disabled");
            return;
        }
    };
    run_periodically(retention, Duration::ZERO, OnStop::AbandonPass, stop).await;
}

impl PeriodicService for Retention {
    async fn run_pass(&mut self) -> Duration {
        match self.run_once().await {
            Ok(report) if report.more => Duration::ZERO,
            Ok(_) => self.config().interval,
            Err(error) => {
                tracing::warn!(%error, "deleting finished jobs failed; will retry");
                self.config().interval
            }
        }
    }
}
