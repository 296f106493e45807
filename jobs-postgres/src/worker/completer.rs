//! Writes run outcomes back to the database, many per statement.
//!
//! Executors hand their outcomes over and free their slot; the completer writes whatever has
//! accumulated in one fenced statement, then the next batch, keeping its pool connection while
//! batches wait. Under load a batch holds every outcome that arrived while the previous one was
//! being written; when idle, an outcome is written alone, without waiting. The crash window: outcomes handed over but not yet written are
//! lost with the process, and those jobs run again after their lease expires (at least once).
//!
//! The queue between them is bounded: it holds at most [`queue_capacity`] outcomes (one batch)
//! besides the batch being written. When it is full (the database is slow or unreachable), an
//! executor waits for room with its slot still held, so the worker claims no more jobs instead of
//! piling up outcomes in memory. Nothing is lost by waiting: the waiting runs' leases are still
//! renewed. The completer never waits for an executor, and stops on a stop at once, which frees
//! every waiting executor (they then write nothing either).
//!
//! An outcome that cannot be written (the database is unreachable, read-only during a failover,
//! a lock not granted in time) is retried with backoff for as long as its lease may still hold by
//! this process's clock; after that it is dropped with an error logged, and the rescue brings the
//! job back. A stop at once writes nothing more.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use super::held_connection::HeldConnection;
use super::{refusal, Shared};
use crate::backoff::ReconnectBackoff;
use crate::metrics::{self, DropReason};
use crate::store::{self, Fenced, Outcome};

/// How many outcomes the completer's queue holds, besides the batch being written: one batch.
pub fn queue_capacity(max_batch: usize) -> usize {
    max_batch.max(1)
}

/// Receives outcomes until `drain` is set and nothing is left, writing them in batches.
pub async fn complete(
    shared: Arc<Shared>,
    mut outcomes: mpsc::Receiver<Outcome>,
    mut drain: watch::Receiver<bool>,
    max_batch: usize,
) {
    let mut abandoned = shared.abandoned.clone();
    // Kept while batches follow each other.
    let mut held = HeldConnection::default();
    loop {
        let first = tokio::select! {
            biased;
            Ok(_) = abandoned.wait_for(|abandoned| *abandoned) => return,
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
        write_on(&shared, batch, &mut held).await;
        if outcomes.is_empty() {
            // No batch waits: the connection goes back to the pool until one does.
            held.drop_connection();
        }
    }
}

/// Writes `batch`, retrying errors of reach (connection lost, database restarting, no
/// connection free) for the outcomes whose lease may still hold; then forgets the jobs. An
/// outcome whose lease was lost is dropped and logged.
///
/// A batch the database refuses outright (an error in the data, not in reaching it) is written
/// again one outcome at a time, so that one bad outcome cannot hold the others back; an outcome
/// refused on its own is dropped with an error logged, and its job comes back when its lease
/// expires (the heartbeat stops renewing it).
pub async fn write(shared: &Shared, batch: Vec<Outcome>) {
    write_on(shared, batch, &mut HeldConnection::default()).await;
}

/// [`write`], on the connection `held` (taken from the pool when there is none, and dropped
/// after an error).
async fn write_on(shared: &Shared, batch: Vec<Outcome>, held: &mut HeldConnection) {
    // Producers wait for the writes that free room under a running limit, and for those that
    // hand jobs claimed ahead back (see `producer`).
    let awaited = batch.iter().any(|outcome| {
        outcome.unstarted
            || shared
                .running
                .frees_running_limit(outcome.id, outcome.lease_token)
    });
    // The writes run one after another; the lock only lends the connection to each of them.
    let connection = tokio::sync::Mutex::new(std::mem::take(held));
    let done = refusal::batch_then_one_by_one(batch, "outcomes", |batch| {
        let connection = &connection;
        async move {
            let mut held = connection.lock().await;
            write_batch(shared, batch, &mut held)
                .await
                .map(|()| Vec::<()>::new())
        }
    })
    .await;
    *held = connection.into_inner();
    for (outcome, error) in done.refused {
        tracing::error!(
            job.id = outcome.id,
            %error,
            decision = ?outcome.decision,
            "the database refused this outcome; it is dropped, and the job will be rescued when its lease expires"
        );
        metrics::outcome_dropped(DropReason::Refused);
        shared.running.remove(outcome.id, outcome.lease_token);
    }
    if awaited {
        shared.outcomes_written.send_modify(|writes| *writes += 1);
    }
}

/// Writes `batch` as [`write`] does; returns it, with the error, if the database refused it.
async fn write_batch(
    shared: &Shared,
    mut batch: Vec<Outcome>,
    held: &mut HeldConnection,
) -> Result<(), (Vec<Outcome>, sqlx::Error)> {
    let mut backoff = ReconnectBackoff::new(shared.config.max_reconnect_delay);
    let mut abandoned = shared.abandoned.clone();
    loop {
        let written = tokio::select! {
            biased;
            Ok(_) = abandoned.wait_for(|abandoned| *abandoned) => {
                // The write was cut off midway: its connection is not used again.
                held.drop_connection();
                return Ok(());
            }
            written = record_on(shared, &batch, held) => written,
        };
        match written {
            Ok(fenced) => {
                for (outcome, fenced) in batch.iter().zip(fenced) {
                    if fenced == Fenced::LeaseLost {
                        let dropped = if outcome.unstarted {
                            "lease lost before the hand-back of this job claimed ahead was written: a rescue took it (another worker may have it now); it never started here, and its hand-back is dropped"
                        } else {
                            "lease lost: another worker or a rescue took the job; this run's outcome is dropped"
                        };
                        tracing::warn!(job.id = outcome.id, "{dropped}");
                        metrics::outcome_dropped(DropReason::LeaseLost);
                    }
                    shared.running.remove(outcome.id, outcome.lease_token);
                }
                return Ok(());
            }
            Err(error) if refusal::is_refusal(&error) => return Err((batch, error)),
            Err(error) => {
                batch.retain(|outcome| {
                    let may_hold = shared.running.may_hold(outcome.id, outcome.lease_token);
                    if !may_hold {
                        let dropped = if outcome.unstarted {
                            "could not hand back a job claimed ahead before its lease ran out or was lost; it never started here, and a rescue makes (or made) it ready, or cancelled if it was asked to stop, with this attempt spent"
                        } else {
                            "could not record the outcome before the lease ran out; the job will be rescued and run again"
                        };
                        tracing::error!(job.id = outcome.id, %error, "{dropped}");
                        metrics::outcome_dropped(DropReason::LeaseRanOut);
                        shared.running.remove(outcome.id, outcome.lease_token);
                    }
                    may_hold
                });
                if batch.is_empty() {
                    return Ok(());
                }
                let delay = backoff.next_delay();
                tracing::warn!(%error, outcomes = batch.len(), ?delay, "could not record outcomes; retrying");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    Ok(_) = abandoned.wait_for(|abandoned| *abandoned) => return Ok(()),
                }
            }
        }
    }
}

/// Records `batch` on the connection `held`, taken from the pool when there is none; an error
/// drops the connection.
async fn record_on(
    shared: &Shared,
    batch: &[Outcome],
    held: &mut HeldConnection,
) -> Result<Vec<Fenced>, sqlx::Error> {
    let connection = held.take_or_acquire(&shared.pool).await?;
    store::record_outcomes(&mut **connection, batch)
        .await
        .inspect_err(|_| held.drop_connection())
}
