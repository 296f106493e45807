//! Looking at dead jobs: [`count_dead`], [`list_dead`] and [`job_details`].

use std::fmt;
use std::time::Duration;

use jobs_core::JobId;
use sqlx::types::Json;
use sqlx::{FromRow, PgPool};

use super::{AttemptRecord, DeadFilter};
use crate::admin::stats::seconds;
use crate::admin::workflow::{Dependent, Prerequisite};
use crate::admin::AdminError;
use crate::store::dead as store;

/// A dead job as a list shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadJob {
    /// Its id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
    /// Attempts made.
    pub attempts: i32,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// Its dedupe key, when it has one.
    pub dedupe_key: Option<String>,
    /// How long it has been dead.
    pub dead_for: Duration,
    /// How many errors its history holds.
    pub error_count: i32,
    /// The error that killed it (the last of its history).
    pub last_error: Option<AttemptRecord>,
}

/// How many dead jobs `filter` selects.
pub async fn count_dead(pool: &PgPool, filter: &DeadFilter) -> Result<u64, AdminError> {
    let count = store::count_dead(pool, &filter.selection()).await?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// Up to `limit` dead jobs selected by `filter` with an id above `after` (0 to start), by id.
pub async fn list_dead(
    pool: &PgPool,
    filter: &DeadFilter,
    after: JobId,
    limit: usize,
) -> Result<Vec<DeadJob>, AdminError> {
    let rows = store::batch(pool, store::LIST, &filter.selection(), after, limit).await?;
    Ok(rows
        .into_iter()
        .map(|row| DeadJob {
            id: row.id,
            kind: row.kind,
            queue: row.queue,
            attempts: row.attempts,
            max_attempts: row.max_attempts,
            dedupe_key: row.dedupe_key,
            dead_for: row.dead_for_secs.and_then(seconds).unwrap_or_default(),
            error_count: row.error_count,
            last_error: row.last_error.map(|Json(record)| record),
        })
        .collect())
}

/// The state of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum JobState {
    /// Waiting for other jobs to end (its prerequisites, or the members of its batch); not
    /// claimable until then.
    Waiting,
    /// Waiting to run (due, or scheduled when its `run_at` is ahead).
    Ready,
    /// Held by a worker.
    Running,
    /// Succeeded.
    Done,
    /// Failed for good; kept until replayed or discarded.
    Dead,
    /// Cancelled: by the job itself, or by an operator (`admin::cancel`).
    Cancelled,
}

impl JobState {
    /// The name stored in the `state` column.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Waiting => "waiting",
            JobState::Ready => "ready",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Dead => "dead",
            JobState::Cancelled => "cancelled",
        }
    }
}

impl JobState {
    /// Whether the job has ended: done, dead or cancelled.
    pub fn has_ended(self) -> bool {
        matches!(self, JobState::Done | JobState::Dead | JobState::Cancelled)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `state` value this version does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown job state `{0}`")]
pub struct UnknownState(String);

impl TryFrom<String> for JobState {
    type Error = UnknownState;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        match value.as_str() {
            "waiting" => Ok(JobState::Waiting),
            "ready" => Ok(JobState::Ready),
            "running" => Ok(JobState::Running),
            "done" => Ok(JobState::Done),
            "dead" => Ok(JobState::Dead),
            "cancelled" => Ok(JobState::Cancelled),
            _ => Err(UnknownState(value)),
        }
    }
}

/// Everything stored about one job, for an operator to read.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct JobDetails {
    /// Its id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
    /// Its state.
    #[sqlx(try_from = "String")]
    pub state: JobState,
    /// Its priority (higher runs first).
    pub priority: i16,
    /// Attempts made (reset to 0 by a replay).
    pub attempts: i32,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// Its arguments, as stored.
    #[sqlx(json)]
    pub payload: serde_json::Value,
    /// Its dedupe key, when it has one.
    pub dedupe_key: Option<String>,
    /// The key's scope: `retained` or `active`.
    pub dedupe_scope: Option<String>,
    /// Every failed attempt, oldest first (replays keep it).
    #[sqlx(json)]
    pub errors: Vec<AttemptRecord>,
    /// When it was enqueued (RFC 3339, UTC).
    pub created_at: String,
    /// When it is, or was, due (RFC 3339, UTC).
    pub run_at: String,
    /// When its last attempt started, if one did.
    pub attempted_at: Option<String>,
    /// When it reached its final state (done, dead, cancelled), if it did.
    pub finished_at: Option<String>,
    /// While it runs: when its worker's lease expires unless renewed (RFC 3339, UTC).
    pub lease_expires_at: Option<String>,
    /// When an operator asked to cancel it, if one did (RFC 3339, UTC).
    pub cancel_requested_at: Option<String>,
    /// Who asked to cancel it, as they said.
    pub cancel_requested_by: Option<String>,
    /// Why, when they said.
    pub cancel_reason: Option<String>,
    /// What it returned, as stored (JSON): present only when it is done with an output.
    #[sqlx(json(nullable))]
    pub output: Option<serde_json::Value>,
    /// The jobs it runs after, by id (at most
    /// [`MAX_LISTED_LINKS`](crate::admin::MAX_LISTED_LINKS)); empty for a job enqueued without
    /// `after`.
    #[sqlx(json)]
    pub prerequisites: Vec<Prerequisite>,
    /// The jobs that run after it, by id (at most
    /// [`MAX_LISTED_LINKS`](crate::admin::MAX_LISTED_LINKS); [`dependent_count`](Self::dependent_count)
    /// has them all).
    #[sqlx(json)]
    pub dependents: Vec<Dependent>,
    /// How many jobs run after it.
    pub dependent_count: i64,
    /// The batch it is a member of, if any.
    pub batch_id: Option<i64>,
    /// The batch it is the callback of, if any.
    pub callback_of: Option<i64>,
    /// For a job cancelled because a prerequisite ended dead or cancelled: that prerequisite.
    pub cancelled_by_prerequisite: Option<JobId>,
}

/// Job `id` with its whole error history, whatever its state; `None` when no such job exists
/// (never enqueued, pruned or discarded).
pub async fn job_details(pool: &PgPool, id: JobId) -> Result<Option<JobDetails>, AdminError> {
    Ok(store::job_details(pool, id).await?)
}
