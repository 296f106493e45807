//! Periodic services every worker runs: the heartbeat that renews leases of running jobs, and
//! the rescuer that returns jobs whose lease expired.
//!
//! Both stop as soon as the worker stops, even in the middle of a statement (one waiting for a
//! connection during an outage, say): an interrupted renewal or rescue is simply not done, and
//! the next one, by this worker or another, does it.

use std::sync::Arc;
use std::time::Instant;

use super::Shared;
use crate::metrics;
use crate::store::{self, RescuedJob};

/// Renews the leases of every job this worker runs, in one statement per beat, until the worker
/// stops.
pub async fn heartbeat(shared: Arc<Shared>) {
    let mut stop = shared.stopped.subscribe();
    loop {
        tokio::select! {
            () = tokio::time::sleep(shared.heartbeat_every()) => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
        tokio::select! {
            () = beat_once(&shared) => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
    }
}

/// One heartbeat: renews the leases still held; the jobs whose lease was found lost are told
/// (through their context) and logged.
pub async fn beat_once(shared: &Shared) {
    let held = shared.running.held();
    if held.is_empty() {
        return;
    }
    let sent_at = Instant::now();
    match store::heartbeat(&shared.pool, &held).await {
        Ok(renewed) => {
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

/// Rescues expired leases every `rescue_interval` until the worker stops.
pub async fn rescuer(shared: Arc<Shared>) {
    let mut stop = shared.stopped.subscribe();
    loop {
        let rescued = tokio::select! {
            rescued = rescue_once(&shared) => rescued,
            _ = stop.wait_for(|stopped| *stopped) => return,
        };
        if let Err(error) = rescued {
            tracing::warn!(%error, "rescuing expired leases failed; will retry");
        }
        tokio::select! {
            () = tokio::time::sleep(shared.config.rescue_interval) => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
    }
}

/// Returns every job whose lease expired to ready (or dead when out of attempts), in batches.
pub async fn rescue_once(shared: &Shared) -> Result<Vec<RescuedJob>, sqlx::Error> {
    let mut all = Vec::new();
    loop {
        let batch = store::rescue_expired(&shared.pool, shared.config.rescue_batch).await?;
        let full = batch.len() == shared.config.rescue_batch;
        for job in &batch {
            tracing::warn!(
                job.id,
                job.kind,
                job.queue,
                job.state,
                "lease expired; job rescued"
            );
            metrics::rescued(&job.kind, &job.queue, &job.state);
        }
        all.extend(batch);
        if !full {
            return Ok(all);
        }
    }
}
