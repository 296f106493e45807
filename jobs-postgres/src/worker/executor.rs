//! Runs one claimed job: decode, call the handler on its own task with panics caught and the
//! timeout applied, decide what follows, and hand the outcome to the completer.
//!
//! Each run is a `job` span (`job.id`, `job.kind`, `job.queue`, `attempt`, and `outcome` once
//! decided) and is counted in the run metrics; payloads are never logged.

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobs_core::{
    decide, Decision, EncodedOutput, HandlerFuture, InvocationError, JobContext, JobError,
    RetryPolicy, RunOutcome,
};
use tokio::sync::{watch, OwnedSemaphorePermit};
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

use super::lease::JobLease;
use super::{completer, Shared};
use crate::metrics::OutcomeLabel;
use crate::store::{ClaimedJob, Outcome};
use crate::transaction::{RunLink, TransactionUse};

/// How a run ended, including the cases where the worker interrupted it.
enum RunEnd {
    Finished(RunOutcome),
    /// Shutdown's grace period ran out: hand the job back without counting the attempt.
    Interrupted,
    /// The worker was told to stop at once: write nothing; the lease brings the job back.
    Abandoned,
}

/// Runs `job` and hands its outcome to the completer (or writes it, without one). Holds
/// `permit` (a slot of the queue) until the run is over. The claim registered the job with the
/// worker's running jobs (`shared.running`), which tell the run through `lease_lost` when the
/// heartbeat finds its lease lost.
///
/// Returns what follows the run: the decision handed over or written, [`Decision::Complete`]
/// (with the output the transaction stored) when the job's own transaction completed it, `None`
/// when a stop at once abandoned it.
pub async fn execute(
    shared: Arc<Shared>,
    job: ClaimedJob,
    lease_lost: watch::Receiver<bool>,
    permit: OwnedSemaphorePermit,
) -> Option<Decision> {
    let span = tracing::info_span!(
        "job",
        job.id,
        job.kind = job.kind.as_str(),
        job.queue = job.queue.as_str(),
        attempt = job.attempts,
        outcome = tracing::field::Empty
    );
    let started = Instant::now();
    let (outcome, next) = run(&shared, &job, lease_lost).instrument(span).await;
    shared
        .metrics
        .job_finished(&job.kind, &job.queue, outcome, started.elapsed());
    let decision = match next {
        Next::Write(decision) => decision,
        Next::CompletedInTransaction(output) => {
            drop(permit);
            return Some(Decision::Complete { output });
        }
        Next::Nothing => {
            // Stopped at once: the lease brings the job back.
            drop(permit);
            return None;
        }
    };
    let frees_running_limit = shared.registry.get(&job.kind).is_some_and(|registration| {
        registration.options.max_running.is_some()
            || registration.options.max_running_per_key.is_some()
    });
    shared
        .running
        .outcome_pending(job.id, job.lease_token, frees_running_limit);
    let outcome = Outcome::of_run(job.id, job.lease_token, decision.clone());
    // The completer forgets the job once its outcome is written.
    match &shared.completer {
        Some(completer) => {
            // The slot is freed once the completer's queue takes the outcome: while the queue is
            // full, this worker claims nothing more (backpressure). The completer is gone only
            // on a stop at once, and then `write` writes nothing.
            let sent = completer.send(outcome).await;
            drop(permit);
            if let Err(unsent) = sent {
                completer::write(&shared, vec![unsent.0]).await;
            }
        }
        None => {
            completer::write(&shared, vec![outcome]).await;
            drop(permit);
        }
    }
    Some(decision)
}

/// What is left to do once a run is over.
enum Next {
    /// Write this decision.
    Write(Decision),
    /// Write nothing: the job's transaction completed it, storing this output.
    CompletedInTransaction(Option<EncodedOutput>),
    /// Write nothing: the worker stopped at once.
    Nothing,
}

/// Runs the job and decides what follows, with the outcome to count.
async fn run(
    shared: &Arc<Shared>,
    job: &ClaimedJob,
    lease_lost: watch::Receiver<bool>,
) -> (OutcomeLabel, Next) {
    let Some(registration) = shared.registry.get(&job.kind).copied() else {
        // Claims ask only for registered kinds, so this is a bug; hand the job back untouched.
        tracing::error!("claimed a job of a kind this worker does not run; handing it back");
        tracing::Span::current().record("outcome", OutcomeLabel::Interrupted.as_str());
        return (
            OutcomeLabel::Interrupted,
            Next::Write(Decision::Snooze {
                delay: Duration::ZERO,
            }),
        );
    };
    let attempt = u32::try_from(job.attempts).unwrap_or(u32::MAX);
    // One rule for how many attempts the job has: the count its row holds, set at enqueue and
    // returned by the claim. The kind's current code may say otherwise after a deploy; it only
    // shapes the backoff.
    let retry = RetryPolicy {
        // At least 1 by the table's CHECK.
        max_attempts: u32::try_from(job.max_attempts).unwrap_or(1),
        ..registration.options.retry
    };
    let lease = shared.lease_of(registration.name);
    let link = Arc::new(RunLink::new(
        shared.pool.clone(),
        Arc::downgrade(&shared.running),
        shared.abandoned.clone(),
        (job.id, job.lease_token),
        registration.name,
    ));
    let context = JobContext::new(
        job.id,
        registration.name,
        job.queue.clone(),
        attempt,
        retry.max_attempts,
        job.dedupe_key.clone(),
        lease,
        shared.shutdown_requested.subscribe(),
    )
    .with_enqueued_at(job.created_at)
    .with_lease(
        Arc::new(JobLease {
            shared: Arc::downgrade(shared),
            id: job.id,
            token: job.lease_token,
            lease,
        }),
        lease_lost,
    )
    .with_backend(Arc::clone(&link) as Arc<dyn Any + Send + Sync>);
    let cancel_requested = shared.running.cancel_signal(job.id, job.lease_token);
    let context = match &cancel_requested {
        Some(requested) => context.with_cancel_requests(requested.clone()),
        None => context,
    };
    let end = match (registration.handler)(context, &job.payload, &shared.states) {
        Ok(future) => run_guarded(shared, future, registration.options.timeout).await,
        Err(error) => RunEnd::Finished(invocation_failure(error)),
    };
    let end = match (link.transaction_use(), end) {
        (TransactionUse::Completed, end) => {
            // The output stored is the transaction's (`complete_with`); what the handler returned
            // is not written again.
            if !matches!(end, RunEnd::Finished(RunOutcome::Completed(_))) {
                tracing::warn!(
                    "the job's transaction completed it, then the run did not end with Ok; the job stays done"
                );
            }
            tracing::debug!("done, in the job's own transaction");
            tracing::Span::current().record("outcome", OutcomeLabel::Done.as_str());
            shared.running.remove(job.id, job.lease_token);
            return (
                OutcomeLabel::Done,
                Next::CompletedInTransaction(link.completed_output()),
            );
        }
        (TransactionUse::DroppedOpen, RunEnd::Finished(RunOutcome::Completed(_))) => {
            RunEnd::Finished(RunOutcome::Failed(JobError::permanent(DROPPED_OPEN)))
        }
        (_, end) => end,
    };
    let mut cancelled_by_request = false;
    let (outcome, next) = match end {
        RunEnd::Finished(outcome) => {
            let decision = decision_of(outcome, attempt, &retry, rand::random::<f64>());
            let requested = cancel_requested
                .as_ref()
                .is_some_and(|requested| *requested.borrow());
            if requested && !matches!(decision, Decision::Complete { .. }) {
                cancelled_by_request = true;
                // The outcome's write makes the job cancelled (it keys on the request in the
                // row, seen here or not); counted as what it becomes.
                tracing::info!(
                    decision = ?decision,
                    "cancellation requested and the run did not succeed: the job ends cancelled"
                );
                (OutcomeLabel::Cancelled, Next::Write(decision))
            } else {
                (OutcomeLabel::of(&decision), Next::Write(decision))
            }
        }
        RunEnd::Interrupted => {
            tracing::info!("interrupted by shutdown; handing the job back");
            (
                OutcomeLabel::Interrupted,
                Next::Write(Decision::Snooze {
                    delay: Duration::ZERO,
                }),
            )
        }
        RunEnd::Abandoned => {
            tracing::warn!(
                "abandoned by a stop at once; the job comes back when its lease expires"
            );
            (OutcomeLabel::Abandoned, Next::Nothing)
        }
    };
    tracing::Span::current().record("outcome", outcome.as_str());
    if let Next::Write(decision) = &next {
        // When cancelled by request, logged above: the decision is not what the job becomes.
        if !cancelled_by_request {
            log_decision(decision);
        }
    }
    (outcome, next)
}

/// The error of a run that returned `Ok` after dropping its transaction open.
const DROPPED_OPEN: &str = "the job returned Ok but dropped its transaction without complete() or rollback(): its effects were rolled back, so the job is not done; call complete() on the transaction, or rollback() to discard its effects on purpose";

/// Longest delay stored for a retry or snooze. A delay past what PostgreSQL's timestamps can
/// hold would make the outcome unwritable.
const MAX_DELAY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `text` made storable in PostgreSQL's `text`, which cannot hold NUL characters: they are kept
/// visible as `\0`. For every error text that comes from elsewhere (jobs, publishers).
pub(crate) fn storable_text(text: String) -> String {
    if text.contains('\0') {
        text.replace('\0', "\\0")
    } else {
        text
    }
}

/// The decision made storable: PostgreSQL's `text` cannot hold NUL characters (they are kept
/// visible as `\0`, see [`storable_text`]), and delays are capped at [`MAX_DELAY`] (100 years).
/// Either would make the outcome, and the batch of outcomes it travels with, unwritable.
fn storable(decision: Decision) -> Decision {
    let clean = storable_text;
    match decision {
        Decision::Retry { delay, mut error } => {
            error.message = clean(error.message);
            Decision::Retry {
                delay: delay.min(MAX_DELAY),
                error,
            }
        }
        Decision::Snooze { delay } => Decision::Snooze {
            delay: delay.min(MAX_DELAY),
        },
        Decision::Dead { mut error } => {
            error.message = clean(error.message);
            Decision::Dead { error }
        }
        Decision::Cancel { reason } => Decision::Cancel {
            reason: clean(reason),
        },
        other => other,
    }
}

/// Runs the handler with [`run_caught`]; interrupted when shutdown's grace period ends, and
/// abandoned on a stop at once (the handler's task is aborted in both cases).
async fn run_guarded(shared: &Shared, future: HandlerFuture, timeout: Option<Duration>) -> RunEnd {
    let mut interrupt = shared.interrupt.subscribe();
    let mut abandoned = shared.abandoned.clone();
    tokio::select! {
        outcome = run_caught(future, timeout) => RunEnd::Finished(outcome),
        _ = interrupt.wait_for(|interrupted| *interrupted) => RunEnd::Interrupted,
        Ok(_) = abandoned.wait_for(|abandoned| *abandoned) => RunEnd::Abandoned,
    }
}

/// Runs a handler's future on a task of its own, so that a panic is caught, within `timeout`
/// (then the run counts as timed out). Dropping the returned future aborts the task.
pub(crate) async fn run_caught(future: HandlerFuture, timeout: Option<Duration>) -> RunOutcome {
    let task = AbortOnDropHandle::new(tokio::spawn(future.instrument(tracing::Span::current())));
    let deadline = async {
        match timeout {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        joined = task => match joined {
            Ok(Ok(output)) => RunOutcome::Completed(output),
            Ok(Err(error)) => RunOutcome::Failed(error),
            Err(join_error) if join_error.is_panic() => {
                RunOutcome::Panicked(panic_message(join_error.into_panic()))
            }
            Err(_) => RunOutcome::Panicked(String::from("the job's task was cancelled")),
        },
        () = deadline => RunOutcome::TimedOut(timeout.unwrap_or_default()),
    }
}

/// How a run ends when its handler could not even be started: a payload that does not decode is
/// dead at once; a missing state value is a transient failure (a worker checks its state before
/// it starts, so this is a bug of the registration).
pub(crate) fn invocation_failure(error: InvocationError) -> RunOutcome {
    match error {
        error @ InvocationError::Undecodable { .. } => RunOutcome::Undecodable(error.to_string()),
        error @ InvocationError::MissingState { .. } => {
            RunOutcome::Failed(JobError::transient(error.to_string()))
        }
    }
}

/// What the worker writes after `outcome` ended attempt `attempt` under `retry`, with a jitter
/// sample in `[0, 1)` for the backoff: [`decide`]'s decision, made [`storable`].
pub(crate) fn decision_of(
    outcome: RunOutcome,
    attempt: u32,
    retry: &RetryPolicy,
    jitter_sample: f64,
) -> Decision {
    storable(decide(outcome, attempt, retry, jitter_sample))
}

fn panic_message(payload: Box<dyn Any + Send>) -> String {
    let text = match payload.downcast::<String>() {
        Ok(text) => *text,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(text) => (*text).to_string(),
            Err(_) => String::from("(a panic without a message)"),
        },
    };
    format!("panicked: {text}")
}

fn log_decision(decision: &Decision) {
    match decision {
        Decision::Complete { .. } => tracing::debug!("done"),
        Decision::Retry { delay, error } => tracing::warn!(
            error.kind,
            error.message,
            ?delay,
            "attempt failed; will retry"
        ),
        // The decoder's message can quote the payload, which is not logged: it is kept with the
        // job instead (`jobs dead show ID`).
        Decision::Dead { error } if error.kind == "undecodable" => tracing::error!(
            error.kind,
            "job is dead: its payload does not decode into the kind's arguments"
        ),
        Decision::Dead { error } => {
            tracing::error!(error.kind, error.message, "job is dead")
        }
        Decision::Snooze { delay } => tracing::debug!(?delay, "snoozed"),
        Decision::Cancel { reason } => tracing::info!(reason, "cancelled"),
    }
}

#[cfg(test)]
mod tests {
    use jobs_core::AttemptError;

    use super::*;

    #[test]
    fn texts_and_delays_are_made_storable() {
        let dead = storable(Decision::Dead {
            error: AttemptError {
                kind: "permanent",
                message: String::from("bad\0byte"),
            },
        });
        let Decision::Dead { error } = dead else {
            panic!("still dead")
        };
        assert_eq!(error.message, "bad\\0byte");
        assert_eq!(
            storable(Decision::Snooze {
                delay: Duration::MAX
            }),
            Decision::Snooze { delay: MAX_DELAY }
        );
        assert_eq!(
            storable(Decision::Cancel {
                reason: String::from("\0")
            }),
            Decision::Cancel {
                reason: String::from("\\0")
            }
        );
    }
}
