//! Pausing and resuming queues: [`pause_queue`], [`resume_queue`], [`paused_queues`].
//!
//! A paused queue keeps its jobs and takes new ones, but no worker claims from it: every claim
//! checks the pause in the database, so a pause holds across every worker process from their
//! next claim on (at once, not at the next poll), and survives restarts. Jobs already running
//! finish and record their outcomes as usual; their retries wait, ready, like every other job of
//! the queue. Resuming announces the queue, so idle workers claim its jobs at once.

use std::time::Duration;

use chrono::{DateTime, Utc};
use jobs_core::check_queue_name;
use sqlx::PgPool;

use crate::admin::error;
use crate::admin::AdminError;
use crate::store::pauses as store;

/// Longest `paused_by` or `reason` text recorded, in bytes.
pub const MAX_PAUSE_NOTE_LEN: usize = 1_000;

/// What [`pause_queue`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseOutcome {
    /// The queue was running; it is paused from now on.
    Paused,
    /// The queue was paused already; its first pause (time, who, why) is kept.
    AlreadyPaused,
}

/// What [`resume_queue`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResumeOutcome {
    /// The queue was paused for this long; workers claim from it again.
    Resumed {
        /// How long it had been paused.
        paused_for: Duration,
    },
    /// The queue was not paused: nothing changed.
    WasNotPaused,
}

/// A paused queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePause {
    /// The queue.
    pub queue: String,
    /// When it was paused (database clock).
    pub paused_at: DateTime<Utc>,
    /// How long it has been paused.
    pub paused_for: Duration,
    /// Who paused it, as they said.
    pub paused_by: String,
    /// Why, when they said.
    pub reason: Option<String>,
}

/// Pauses `queue` in every worker process: no job of it is claimed until [`resume_queue`].
/// `paused_by` and `reason` are kept for the record (`jobs stats` shows them). Pausing a queue
/// no worker serves yet, or one with no jobs, is allowed: the pause waits for them.
///
/// Refused before the database, with [`AdminError::InvalidQueue`] or
/// [`AdminError::InvalidText`], when the queue name breaks the naming rules or a text holds
/// U+0000 or exceeds [`MAX_PAUSE_NOTE_LEN`] bytes.
pub async fn pause_queue(
    pool: &PgPool,
    queue: &str,
    paused_by: &str,
    reason: Option<&str>,
) -> Result<PauseOutcome, AdminError> {
    check_queue_name(queue)?;
    check_note("paused_by", paused_by)?;
    if let Some(reason) = reason {
        check_note("reason", reason)?;
    }
    let paused = store::pause_queue(pool, queue, paused_by, reason).await?;
    if paused.is_some() {
        tracing::info!(%queue, %paused_by, reason = reason.unwrap_or(""), "queue paused");
        Ok(PauseOutcome::Paused)
    } else {
        Ok(PauseOutcome::AlreadyPaused)
    }
}

/// Resumes `queue`: workers claim from it again, idle ones at once. Refused before the database
/// when the queue name breaks the naming rules.
pub async fn resume_queue(pool: &PgPool, queue: &str) -> Result<ResumeOutcome, AdminError> {
    check_queue_name(queue)?;
    match store::resume_queue(pool, queue).await? {
        Some(paused_secs) => {
            let paused_for = Duration::try_from_secs_f64(paused_secs.max(0.0)).unwrap_or_default();
            tracing::info!(%queue, ?paused_for, "queue resumed");
            Ok(ResumeOutcome::Resumed { paused_for })
        }
        None => Ok(ResumeOutcome::WasNotPaused),
    }
}

/// Every paused queue, by name.
pub async fn paused_queues(pool: &PgPool) -> Result<Vec<QueuePause>, AdminError> {
    let rows = store::list_pauses(pool).await?;
    Ok(rows
        .into_iter()
        .map(|row| QueuePause {
            queue: row.queue,
            paused_at: row.paused_at,
            paused_for: Duration::try_from_secs_f64(row.paused_secs.max(0.0)).unwrap_or_default(),
            paused_by: row.paused_by,
            reason: row.reason,
        })
        .collect())
}

/// Refuses a text the database cannot store (U+0000) or that is too long to be a note.
fn check_note(field: &'static str, text: &str) -> Result<(), AdminError> {
    error::check_note(field, text, MAX_PAUSE_NOTE_LEN)
}
