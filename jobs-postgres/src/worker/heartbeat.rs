//! The heartbeat: renews the leases of every job this worker runs, in one statement per beat,
//! so that a job longer than its lease is not rescued while it runs. Its answer also says which
//! of those jobs an operator asked to stop: their runs are told (`ctx.cancel_requested()`).
//!
//! It stops as soon as the worker stops, even in the middle of a statement: an interrupted
//! renewal is simply not done.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Shared;
use crate::periodic::{run_periodically, OnStop, PeriodicService};
use crate::store;

/// Renews the leases of every job this worker runs, one beat every
/// [`Shared::heartbeat_every`], until the worker stops.
pub(crate) async fn heartbeat(shared: Arc<Shared>) {
    let every = shared.heartbeat_every();
    let mut stopped = shared.stopped.subscribe();
    let stop = async move {
        let _ = stopped.wait_for(|stopped| *stopped).await;
    };
    run_periodically(
        Heartbeat { shared, every },
        every,
        OnStop::AbandonPass,
        stop,
    )
    .await;
}

/// The heartbeat of one worker.
struct Heartbeat {
    shared: Arc<Shared>,
    every: Duration,
}

impl PeriodicService for Heartbeat {
    async fn run_pass(&mut self) -> Duration {
        beat_once(&self.shared).await;
        self.every
    }
}

/// One heartbeat: renews the leases still held; the jobs whose lease was found lost, or that
/// were asked to stop, are told (through their context) and logged.
pub(crate) async fn beat_once(shared: &Shared) {
    let held = shared.running.held();
    if held.is_empty() {
        return;
    }
    let sent_at = Instant::now();
    match store::heartbeat(&shared.pool, &held).await {
        Ok(renewed) => {
            for id in shared.running.cancel_requested(&renewed) {
                tracing::info!(job.id = id, "cancellation requested; the job is told");
            }
            let renewed: Vec<_> = renewed.iter().map(store::RenewedLease::run).collect();
            let lost = shared.running.renewed(&held, &renewed, sent_at);
            for id in lost {
                tracing::warn!(
                    job.id = id,
                    "lease lost while running: another worker may run this job; its outcome here will be dropped"
                );
            }
        }
        Err(error) => tracing::warn!(%error, "renewing leases failed; will retry at the next beat"),
    }
}
