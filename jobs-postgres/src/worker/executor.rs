//! Runs one claimed job: decode, call the handler on its own task with panics caught and the
//! timeout applied, decide what follows, and hand the outcome to the completer.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use jobs_core::{
    decide, BoxFuture, Decision, InvocationError, JobContext, JobError, JobResult, RunOutcome,
};
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use super::{completer, Shared};
use crate::store::{ClaimedJob, Outcome};

/// How a run ended, including the case where the worker interrupted it.
enum RunEnd {
    Finished(RunOutcome),
    /// Shutdown's grace period ran out: hand the job back without counting the attempt.
    Interrupted,
}

/// Runs `job` and hands its outcome to the completer. Holds `permit` (a slot of the queue)
/// until the run is over.
pub async fn execute(shared: Arc<Shared>, job: ClaimedJob, permit: OwnedSemaphorePermit) {
    let span = tracing::info_span!(
        "job",
        job.id,
        job.kind = job.kind.as_str(),
        job.queue = job.queue.as_str(),
        attempt = job.attempts
    );
    shared
        .running
        .insert(job.id, job.lease_token, shared.config.lease);
    let decision = run(&shared, &job).instrument(span).await;
    let outcome = Outcome {
        id: job.id,
        lease_token: job.lease_token,
        decision,
    };
    // The completer forgets the job once its outcome is written.
    match &shared.completer {
        Some(completer) => {
            drop(permit);
            if let Err(unsent) = completer.send(outcome) {
                completer::write(&shared, vec![unsent.0]).await;
            }
        }
        None => {
            completer::write(&shared, vec![outcome]).await;
            drop(permit);
        }
    }
}

/// Runs the job and decides what follows.
async fn run(shared: &Shared, job: &ClaimedJob) -> Decision {
    let Some(registration) = shared.registry.get(&job.kind).copied() else {
        // Claims ask only for registered kinds, so this is a bug; hand the job back untouched.
        tracing::error!("claimed a job of a kind this worker does not run; handing it back");
        return Decision::Snooze {
            delay: Duration::ZERO,
        };
    };
    let attempt = u32::try_from(job.attempts).unwrap_or(u32::MAX);
    let context = JobContext::new(
        job.id,
        registration.name,
        job.queue.clone(),
        attempt,
        u32::try_from(job.max_attempts).unwrap_or(u32::MAX),
        job.dedupe_key.clone(),
        shared.config.lease,
        shared.shutdown_requested.subscribe(),
    );
    let end = match (registration.handler)(context, &job.payload, &shared.states) {
        Ok(future) => run_guarded(shared, future, registration.options.timeout).await,
        Err(error @ InvocationError::Undecodable { .. }) => {
            RunEnd::Finished(RunOutcome::Undecodable(error.to_string()))
        }
        Err(error @ InvocationError::MissingState { .. }) => {
            RunEnd::Finished(RunOutcome::Failed(JobError::transient(error.to_string())))
        }
    };
    let decision = match end {
        RunEnd::Finished(outcome) => decide(
            outcome,
            attempt,
            &registration.options.retry,
            rand::random::<f64>(),
        ),
        RunEnd::Interrupted => {
            tracing::info!("interrupted by shutdown; handing the job back");
            Decision::Snooze {
                delay: Duration::ZERO,
            }
        }
    };
    log_decision(&decision);
    decision
}

/// Runs the handler on its own task so that a panic is caught, with the kind's timeout, and
/// interrupted when shutdown's grace period ends.
async fn run_guarded(
    shared: &Shared,
    future: BoxFuture<'static, JobResult>,
    timeout: Option<Duration>,
) -> RunEnd {
    let mut task = tokio::spawn(future.instrument(tracing::Span::current()));
    let mut interrupt = shared.interrupt.subscribe();
    let deadline = async {
        match timeout {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        joined = &mut task => RunEnd::Finished(match joined {
            Ok(Ok(())) => RunOutcome::Completed,
            Ok(Err(error)) => RunOutcome::Failed(error),
            Err(join_error) if join_error.is_panic() => {
                RunOutcome::Panicked(panic_message(join_error.into_panic()))
            }
            Err(_) => RunOutcome::Panicked(String::from("the job's task was cancelled")),
        }),
        () = deadline => {
            task.abort();
            RunEnd::Finished(RunOutcome::TimedOut(timeout.unwrap_or_default()))
        }
        _ = interrupt.wait_for(|interrupted| *interrupted) => {
            task.abort();
            RunEnd::Interrupted
        }
    }
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
        Decision::Complete => tracing::debug!("done"),
        Decision::Retry { delay, error } => tracing::warn!(
            error.kind,
            error.message,
            ?delay,
            "attempt failed; will retry"
        ),
        Decision::Dead { error } => {
            tracing::error!(error.kind, error.message, "job is dead")
        }
        Decision::Snooze { delay } => tracing::debug!(?delay, "snoozed"),
        Decision::Cancel { reason } => tracing::info!(reason, "cancelled"),
    }
}
