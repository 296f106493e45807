//! Workflows as operators see them: [`workflow`] lists the jobs connected to one through
//! dependencies, with its batch; [`JobDetails`](super::JobDetails) names a job's prerequisites
//! and dependents ([`Prerequisite`], [`Dependent`]).

use jobs_core::{JobId, OnFailure};
use serde::{Deserialize, Deserializer};
use sqlx::PgPool;

use super::{AdminError, JobState};
use crate::batch::{self, BatchError, BatchId, BatchOutcome};
use crate::store::batches::BatchOf;
use crate::store::workflows as store;

/// Jobs [`workflow`] lists unless asked otherwise.
pub const DEFAULT_WORKFLOW_LIMIT: usize = 1_000;
/// Most jobs [`workflow`] lists.
pub const MAX_WORKFLOW_LIMIT: usize = 10_000;
/// Most prerequisites, and most dependents, [`JobDetails`](super::JobDetails) lists.
pub const MAX_LISTED_LINKS: usize = 1_000;

/// A job that a job runs after.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Prerequisite {
    /// Its id.
    pub id: JobId,
    /// Its kind; `None` when it is gone (discarded, or pruned once every dependent ended).
    pub kind: Option<String>,
    /// Its state; `None` when it is gone.
    pub state: Option<JobState>,
    /// What the dependent does if it ends dead or cancelled.
    #[serde(deserialize_with = "on_failure_named")]
    pub on_failure: OnFailure,
}

/// An [`OnFailure`] from its stored name.
fn on_failure_named<'de, D: Deserializer<'de>>(deserializer: D) -> Result<OnFailure, D::Error> {
    let name = String::deserialize(deserializer)?;
    match name.as_str() {
        "cancel" => Ok(OnFailure::Cancel),
        "run" => Ok(OnFailure::Run),
        _ => Err(serde::de::Error::custom(format!(
            "unknown on_failure `{name}`"
        ))),
    }
}

/// A job that runs after a job.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Dependent {
    /// Its id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Its state.
    pub state: JobState,
}

/// One job of a [`Workflow`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowJob {
    /// Its id.
    pub id: JobId,
    /// Its kind; `None` when the job is gone (pruned or discarded) but a dependent still names
    /// it.
    pub kind: Option<String>,
    /// Its queue; `None` when the job is gone.
    pub queue: Option<String>,
    /// Its state; `None` when the job is gone.
    pub state: Option<JobState>,
    /// The batch it is a member of, if any.
    pub batch: Option<BatchId>,
    /// The ids of the jobs it runs after, ascending: the workflow's edges.
    pub prerequisites: Vec<JobId>,
}

/// The jobs connected to one job: see [`workflow`].
#[derive(Debug, Clone, PartialEq)]
pub struct Workflow {
    /// The job asked about.
    pub job: JobId,
    /// The connected jobs, by id, the job asked about among them.
    pub jobs: Vec<WorkflowJob>,
    /// More jobs are connected than the limit allowed: [`jobs`](Self::jobs) is not the whole.
    pub truncated: bool,
    /// The batch the job is a member or the callback of, if any (its members are counted
    /// there, not listed in [`jobs`](Self::jobs); its callback is listed).
    pub batch: Option<BatchOutcome>,
}

impl Workflow {
    /// The listed job with this id.
    pub fn get(&self, id: JobId) -> Option<&WorkflowJob> {
        self.jobs
            .binary_search_by_key(&id, |job| job.id)
            .ok()
            .map(|at| &self.jobs[at])
    }

    /// The listed jobs that run after job `id`, by id.
    pub fn dependents_of(&self, id: JobId) -> impl Iterator<Item = &WorkflowJob> {
        self.jobs
            .iter()
            .filter(move |job| job.prerequisites.contains(&id))
    }
}

/// The workflow of job `id`: the jobs connected to it through dependencies, in either direction
/// and transitively (its prerequisites and theirs, its dependents and theirs, and their other
/// prerequisites), at most `limit` of them (1 to [`MAX_WORKFLOW_LIMIT`];
/// [`Workflow::truncated`] says whether that was all), each with its state and its
/// prerequisites; and for a batch member or callback, the batch's outcome, its callback
/// listed with the jobs connected to it. `None` when no job `id` exists.
///
/// Walked through the dependency indexes, each job once, reading about as many index entries
/// as it lists; a batch's members are counted, not listed.
pub async fn workflow(
    pool: &PgPool,
    id: JobId,
    limit: usize,
) -> Result<Option<Workflow>, AdminError> {
    if !(1..=MAX_WORKFLOW_LIMIT).contains(&limit) {
        return Err(AdminError::InvalidFilter {
            field: "workflow limit",
            problem: format!(
                "{limit} is out of range: a workflow lists 1 to {MAX_WORKFLOW_LIMIT} jobs"
            ),
        });
    }
    let wanted = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = store::workflow_jobs(pool, id, wanted + 1).await?;
    let truncated = rows.len() > limit;
    let mut jobs = rows
        .into_iter()
        .map(|row| {
            let state = row
                .state
                .map(JobState::try_from)
                .transpose()
                .map_err(|error| AdminError::Database(sqlx::Error::Decode(error.into())))?;
            Ok(WorkflowJob {
                id: row.id,
                kind: row.kind,
                queue: row.queue,
                state,
                batch: row.batch_id,
                prerequisites: row.prerequisites,
            })
        })
        .collect::<Result<Vec<_>, AdminError>>()?;
    let Some(start) = jobs.iter().find(|job| job.id == id) else {
        return Ok(None);
    };
    if start.kind.is_none() {
        return Ok(None);
    }
    let member_of = start.batch;
    if truncated {
        // One more than the limit was read, to tell: leave out the newest, never the job asked
        // about.
        if let Some(at) = jobs.iter().rposition(|job| job.id != id) {
            jobs.remove(at);
        }
    }
    let which = match member_of {
        Some(batch) => BatchOf::Id(batch),
        None => BatchOf::Callback(id),
    };
    let batch = batch::batch_outcome(pool, which)
        .await
        .map_err(|error| match error {
            BatchError::Database(error) => AdminError::Database(error),
            other => AdminError::Database(sqlx::Error::Protocol(other.to_string())),
        })?;
    Ok(Some(Workflow {
        job: id,
        jobs,
        truncated,
        batch,
    }))
}

/// Most waiting jobs, and most open batches, [`stats`](super::stats) reads: the longest
/// waiting, and the longest open.
pub const STUCK_LISTED: usize = 10;

/// A job waiting for others, as [`Stats::longest_waiting`](super::Stats::longest_waiting)
/// lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingJob {
    /// Its id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
    /// How long ago it was enqueued.
    pub waiting_for: std::time::Duration,
    /// The batch whose callback it is, when it waits for a batch's members.
    pub callback_of: Option<BatchId>,
    /// The first prerequisite (by id) it still waits for; `None` for a batch's callback.
    pub waits_for: Option<BlockingJob>,
}

/// A prerequisite a waiting job still waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockingJob {
    /// Its id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Its state: waiting, ready or running.
    pub state: JobState,
    /// Attempts it made.
    pub attempts: i32,
    /// Its latest error, if it has failed before.
    pub last_error: Option<super::AttemptRecord>,
}

/// A batch not ended yet, as [`Stats::longest_open_batches`](super::Stats::longest_open_batches)
/// lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenBatch {
    /// Its id.
    pub id: BatchId,
    /// Its callback, if it has one.
    pub callback: Option<JobId>,
    /// How long ago it was created.
    pub open_for: std::time::Duration,
    /// Members not ended yet.
    pub pending: u64,
}

/// The [`STUCK_LISTED`] jobs waiting longest, oldest first.
pub(crate) async fn longest_waiting(pool: &PgPool) -> Result<Vec<WaitingJob>, AdminError> {
    let limit = i64::try_from(STUCK_LISTED).unwrap_or(i64::MAX);
    store::longest_waiting(pool, limit)
        .await?
        .into_iter()
        .map(|row| {
            let waits_for = match (
                row.prerequisite_id,
                row.prerequisite_kind,
                row.prerequisite_state,
            ) {
                (Some(id), Some(kind), Some(state)) => Some(BlockingJob {
                    id,
                    kind,
                    state: JobState::try_from(state)
                        .map_err(|error| AdminError::Database(sqlx::Error::Decode(error.into())))?,
                    attempts: row.prerequisite_attempts.unwrap_or(0),
                    last_error: row.prerequisite_last_error.map(|record| record.0),
                }),
                _ => None,
            };
            Ok(WaitingJob {
                id: row.id,
                kind: row.kind,
                queue: row.queue,
                waiting_for: super::stats::seconds(row.waiting_secs).unwrap_or_default(),
                callback_of: row.callback_of,
                waits_for,
            })
        })
        .collect()
}

/// The [`STUCK_LISTED`] batches open longest, oldest first.
pub(crate) async fn longest_open_batches(pool: &PgPool) -> Result<Vec<OpenBatch>, AdminError> {
    let limit = i64::try_from(STUCK_LISTED).unwrap_or(i64::MAX);
    Ok(store::longest_open_batches(pool, limit)
        .await?
        .into_iter()
        .map(|row| OpenBatch {
            id: row.id,
            callback: row.callback_id,
            open_for: super::stats::seconds(row.open_secs).unwrap_or_default(),
            pending: u64::try_from(row.pending).unwrap_or(0),
        })
        .collect())
}
