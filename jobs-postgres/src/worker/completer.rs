//! Writes run outcomes back to the database, many per statement.
//!
//! Executors hand their outcomes over and free their slot at once; the completer writes whatever
//! has accumulated in one fenced statement, then the next batch. Under load a batch holds every
//! outcome that arrived while the previous one was being written; when idle, an outcome is
//! written alone, without waiting. The crash window: outcomes handed over but not yet written are
//! lost with the process, and those jobs run again after their lease expires (at least once).

use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use super::backoff::ReconnectBackoff;
use super::Shared;
use crate::store::{self, Fenced, Outcome};

/// Receives outcomes until `drain` is set and nothing is left, writing them in batches.
pub async fn complete(
    shared: Arc<Shared>,
    mut outcomes: mpsc::UnboundedReceiver<Outcome>,
    mut drain: watch::Receiver<bool>,
    max_batch: usize,
) {
    loop {
        let first = tokio::select! {
            biased;
            outcome = outcomes.recv() => match outcome {
                Some(outcome) => outcome,
                None => return,
            },
            _ = drain.wait_for(|drain| *drain) => match outcomes.try_recv() {
                Ok(outcome) => outcome,
                Err(_) => return,
            },
        };
        let mut batch = vec![first];
        while batch.len() < max_batch {
            match outcomes.try_recv() {
                Ok(outcome) => batch.push(outcome),
                Err(_) => break,
            }
        }
        write(&shared, batch).await;
    }
}

/// Writes `batch`, retrying database errors for the outcomes whose lease may still hold; then
/// forgets the jobs. An outcome whose lease was lost is dropped and logged.
pub async fn write(shared: &Shared, mut batch: Vec<Outcome>) {
    let mut backoff = ReconnectBackoff::new(shared.config.max_reconnect_delay);
    loop {
        match store::record_outcomes(&shared.pool, &batch).await {
            Ok(fenced) => {
                for (outcome, fenced) in batch.iter().zip(fenced) {
                    if fenced == Fenced::LeaseLost {
                        tracing::warn!(
                            job.id = outcome.id,
                            "lease lost: another worker or a rescue took the job; this run's outcome is dropped"
                        );
                    }
                    shared.running.remove(outcome.id);
                }
                return;
            }
            Err(error) => {
                batch.retain(|outcome| {
                    let may_hold = shared.running.may_hold(outcome.id);
                    if !may_hold {
                        tracing::error!(
                            job.id = outcome.id,
                            %error,
                            "could not record the outcome before the lease ran out; the job will be rescued and run again"
                        );
                        shared.running.remove(outcome.id);
                    }
                    may_hold
                });
                if batch.is_empty() {
                    return;
                }
                let delay = backoff.next_delay();
                tracing::warn!(%error, outcomes = batch.len(), ?delay, "could not record outcomes; retrying");
                tokio::time::sleep(delay).await;
            }
        }
    }
}
