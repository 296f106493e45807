//! The health gauges, as a worker publishes them: every `gauges_interval` each worker publishes
//! the health numbers as gauges, and one process per interval counts them
//! ([`Gauges::refresh_shared`]).
//!
//! It stops as soon as the worker stops, even in the middle of the statement: the gauges keep
//! their last values.

use std::future::Future;
use std::time::Duration;

use sqlx::PgPool;

use crate::metrics::Gauges;
use crate::periodic::{run_periodically, OnStop, PeriodicService};

/// Publishes the gauges every `interval` on `pool` until `stop` resolves.
pub(crate) async fn publish_gauges(
    pool: PgPool,
    interval: Duration,
    stop: impl Future<Output = ()>,
) {
    let publisher = GaugePublisher {
        pool,
        interval,
        gauges: Gauges::new(),
    };
    run_periodically(publisher, Duration::ZERO, OnStop::AbandonPass, stop).await;
}

/// The gauges one worker publishes.
struct GaugePublisher {
    pool: PgPool,
    interval: Duration,
    gauges: Gauges,
}

impl PeriodicService for GaugePublisher {
    async fn run_pass(&mut self) -> Duration {
        if let Err(error) = self.gauges.refresh_shared(&self.pool, self.interval).await {
            tracing::warn!(%error, "reading the health numbers for the gauges failed; will retry");
        }
        self.interval
    }
}
