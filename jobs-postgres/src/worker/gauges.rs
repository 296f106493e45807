//! The periodic loop around [`Gauges::refresh_shared`]: every worker publishes the health numbers
//! as gauges every `gauges_interval`, and one process per interval counts them.
//!
//! It stops as soon as the worker stops, even in the middle of the statement: the gauges keep
//! their last values.

use std::sync::Arc;

use super::Shared;
use crate::metrics::Gauges;

/// Publishes the gauges until the worker stops, if the worker's settings enable it.
pub async fn publisher(shared: Arc<Shared>) {
    let Some(interval) = shared.config.gauges_interval else {
        return;
    };
    let mut gauges = Gauges::new();
    let mut stop = shared.stopped.subscribe();
    loop {
        let refreshed = tokio::select! {
            refreshed = gauges.refresh_shared(&shared.pool, interval) => refreshed,
            _ = stop.wait_for(|stopped| *stopped) => return,
        };
        if let Err(error) = refreshed {
            tracing::warn!(%error, "reading the health numbers for the gauges failed; will retry");
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
    }
}
