//! `jobs queue pause|resume`: stop and restart the claims of a queue in every worker process.

use jobs_postgres::admin::{self, HumanDuration, PauseOutcome, ResumeOutcome};
use jobs_postgres::PgPool;
use serde_json::json;

use super::{json_text, Report};
use crate::error::CliError;
use crate::escape::shown;

/// Pauses `queue`, recorded as paused by `by` (default: `$USER@hostname`) for `reason`. Says so
/// when it was paused already (safe to run twice).
pub async fn pause(
    pool: &PgPool,
    queue: &str,
    reason: Option<&str>,
    by: Option<String>,
    json: bool,
) -> Result<Report, CliError> {
    let by = by.unwrap_or_else(operator);
    let outcome = admin::pause_queue(pool, queue, &by, reason).await?;
    let paused = outcome == PauseOutcome::Paused;
    if json {
        return Ok(Report::success(json_text(&json!({
            "queue": queue,
            "paused": paused,
            "already_paused": !paused,
        }))));
    }
    let queue = shown(queue);
    Ok(Report::success(if paused {
        format!(
            "paused queue {queue}: workers claim none of its jobs until `jobs queue resume {queue}`; running jobs finish\n"
        )
    } else {
        format!("queue {queue} was paused already: its first pause is kept\n")
    }))
}

/// Resumes `queue`; says so when it was not paused (safe to run twice).
pub async fn resume(pool: &PgPool, queue: &str, json: bool) -> Result<Report, CliError> {
    let outcome = admin::resume_queue(pool, queue).await?;
    if json {
        let paused_secs = match outcome {
            ResumeOutcome::Resumed { paused_for } => Some(paused_for.as_secs_f64()),
            ResumeOutcome::WasNotPaused => None,
        };
        return Ok(Report::success(json_text(&json!({
            "queue": queue,
            "resumed": paused_secs.is_some(),
            "paused_secs": paused_secs,
        }))));
    }
    let queue = shown(queue);
    Ok(Report::success(match outcome {
        ResumeOutcome::Resumed { paused_for } => format!(
            "resumed queue {queue} after {}: workers claim its jobs again\n",
            HumanDuration(paused_for)
        ),
        ResumeOutcome::WasNotPaused => format!("queue {queue} was not paused: nothing to do\n"),
    }))
}

/// Who runs the command, as `user@host`, for the record of a pause or a cancellation.
pub(super) fn operator() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("USERNAME"))
        .unwrap_or_else(|_| String::from("unknown"));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|host| host.trim().to_owned())
        .filter(|host| !host.is_empty())
        .unwrap_or_else(|| String::from("unknown"));
    format!("{user}@{host}")
}
