//! Pausing and resuming a queue.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use jobs_postgres::admin::{self, PauseOutcome, ResumeOutcome};
use serde::Deserialize;

use super::done;
use crate::audit;
use crate::forms::CheckedForm;
use crate::html::age;
use crate::problem::Problem;
use crate::state::Console;

/// The queue to pause or resume, and why.
#[derive(Debug, Deserialize)]
pub(crate) struct QueueAction {
    queue: String,
    reason: Option<String>,
}

/// `POST /queues/pause`.
pub(crate) async fn pause(
    State(console): State<Console>,
    form: CheckedForm<QueueAction>,
) -> Result<Response, Problem> {
    let CheckedForm { visitor, fields } = form;
    let reason = fields
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|reason| !reason.is_empty());
    let outcome = admin::pause_queue(&console.pool, &fields.queue, &visitor.actor, reason).await?;
    let what = match outcome {
        PauseOutcome::Paused => format!("Paused queue {}", fields.queue),
        PauseOutcome::AlreadyPaused => format!("Queue {} was paused already", fields.queue),
    };
    audit::record(&visitor.actor, "pause queue", &fields.queue, &what);
    Ok(done(&console, "/", &what).into_response())
}

/// `POST /queues/resume`.
pub(crate) async fn resume(
    State(console): State<Console>,
    form: CheckedForm<QueueAction>,
) -> Result<Response, Problem> {
    let CheckedForm { visitor, fields } = form;
    let outcome = admin::resume_queue(&console.pool, &fields.queue).await?;
    let what = match outcome {
        ResumeOutcome::Resumed { paused_for } => format!(
            "Resumed queue {} (paused for {})",
            fields.queue,
            age(Some(paused_for))
        ),
        ResumeOutcome::WasNotPaused => format!("Queue {} was not paused", fields.queue),
    };
    audit::record(&visitor.actor, "resume queue", &fields.queue, &what);
    Ok(done(&console, "/", &what).into_response())
}
