//! Workflows as operators see them: the jobs connected to one through dependencies, the jobs
//! waiting longest and what each still waits for, and the batches open longest.

use jobs_core::JobId;
use sqlx::types::Json;
use sqlx::{FromRow, PgPool};

use crate::admin::AttemptRecord;

/// The jobs connected to job `$1` through dependencies, in either direction and transitively
/// (its prerequisites, their prerequisites, its dependents, theirs, and the other
/// prerequisites of those), starting also from the callback of the batch `$1` is a member of;
/// at most `$2` of them, by id. Each row is a job's id, with its kind, queue, state and batch
/// (NULL when the job is gone: pruned or discarded) and the ids of its prerequisites.
///
/// Walked breadth first through the dependency indexes (`jobs_dependencies_pkey` from a
/// prerequisite, `jobs_dependencies_dependent` from a dependent), each job once; the walk stops
/// once `$2` jobs are found.
pub const WORKFLOW_JOBS: &str = "
WITH RECURSIVE seeds AS (
    SELECT $1::int8 AS id
    UNION ALL
    SELECT b.callback_id FROM jobs_batches AS b
    WHERE b.id = (SELECT batch_id FROM jobs_queue WHERE id = $1)
      AND b.callback_id IS NOT NULL AND b.callback_id <> $1
), connected(id) AS (
    SELECT id FROM seeds
    UNION
    SELECT linked.id FROM connected AS c
    CROSS JOIN LATERAL (
        SELECT e.prerequisite_id AS id FROM jobs_dependencies AS e WHERE e.dependent_id = c.id
        UNION ALL
        SELECT e.dependent_id FROM jobs_dependencies AS e WHERE e.prerequisite_id = c.id
    ) AS linked
), found AS (
    SELECT id FROM connected LIMIT $2
)
SELECT f.id, j.kind, j.queue, j.state, j.batch_id,
       ARRAY(SELECT e.prerequisite_id FROM jobs_dependencies AS e WHERE e.dependent_id = f.id
             ORDER BY e.prerequisite_id) AS prerequisites
FROM found AS f
LEFT JOIN jobs_queue AS j ON j.id = f.id
ORDER BY f.id";

/// The `$1` jobs waiting longest (the oldest waiting ids, read from the waiting index alone and
/// sorted: it holds only waiting jobs), oldest first, each with how long ago it was enqueued,
/// the batch whose callback it is (if it is one), and the first prerequisite it still waits
/// for (waiting, ready or running), with that job's kind, state, attempts and last error.
pub const LONGEST_WAITING: &str = "
SELECT w.id, w.kind, w.queue,
       extract(epoch FROM now() - w.created_at)::float8 AS waiting_secs,
       (SELECT b.id FROM jobs_batches AS b WHERE b.callback_id = w.id) AS callback_of,
       p.id AS prerequisite_id, p.kind AS prerequisite_kind, p.state AS prerequisite_state,
       p.attempts AS prerequisite_attempts, p.errors -> -1 AS prerequisite_last_error
FROM jobs_queue AS w
LEFT JOIN LATERAL (
    SELECT p.id, p.kind, p.state, p.attempts, p.errors
    FROM jobs_dependencies AS e JOIN jobs_queue AS p ON p.id = e.prerequisite_id
    WHERE e.dependent_id = w.id AND p.state IN ('waiting', 'ready', 'running')
    ORDER BY p.id
    LIMIT 1
) AS p ON true
WHERE w.id = ANY(ARRAY(
        SELECT id FROM jobs_queue WHERE state = 'waiting' ORDER BY id + 0 LIMIT $1))
  AND w.state = 'waiting'
ORDER BY w.id";

/// The `$1` batches open longest (not ended), oldest first, through the open-batch index, each
/// with how long ago it was created, its callback, and how many members it has pending.
pub const LONGEST_OPEN_BATCHES: &str = "
SELECT b.id, b.callback_id,
       extract(epoch FROM now() - b.created_at)::float8 AS open_secs,
       (SELECT coalesce(sum(c.pending), 0)::int8 FROM jobs_batch_chunks AS c
        WHERE c.batch_id = b.id) AS pending
FROM jobs_batches AS b
WHERE b.ended_at IS NULL
ORDER BY b.created_at, b.id
LIMIT $1";

/// One job of [`WORKFLOW_JOBS`].
#[derive(Debug, FromRow)]
pub(crate) struct WorkflowRow {
    pub(crate) id: JobId,
    pub(crate) kind: Option<String>,
    pub(crate) queue: Option<String>,
    pub(crate) state: Option<String>,
    pub(crate) batch_id: Option<i64>,
    pub(crate) prerequisites: Vec<JobId>,
}

/// Up to `limit` jobs connected to job `id`: [`WORKFLOW_JOBS`].
pub(crate) async fn workflow_jobs(
    pool: &PgPool,
    id: JobId,
    limit: i64,
) -> Result<Vec<WorkflowRow>, sqlx::Error> {
    sqlx::query_as(WORKFLOW_JOBS)
        .bind(id)
        .bind(limit)
        .fetch_all(pool)
        .await
}

/// One job of [`LONGEST_WAITING`].
#[derive(Debug, FromRow)]
pub(crate) struct WaitingRow {
    pub(crate) id: JobId,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) waiting_secs: f64,
    pub(crate) callback_of: Option<i64>,
    pub(crate) prerequisite_id: Option<JobId>,
    pub(crate) prerequisite_kind: Option<String>,
    pub(crate) prerequisite_state: Option<String>,
    pub(crate) prerequisite_attempts: Option<i32>,
    pub(crate) prerequisite_last_error: Option<Json<AttemptRecord>>,
}

/// The `limit` jobs waiting longest: [`LONGEST_WAITING`].
pub(crate) async fn longest_waiting(
    pool: &PgPool,
    limit: i64,
) -> Result<Vec<WaitingRow>, sqlx::Error> {
    sqlx::query_as(LONGEST_WAITING)
        .bind(limit)
        .fetch_all(pool)
        .await
}

/// One batch of [`LONGEST_OPEN_BATCHES`].
#[derive(Debug, FromRow)]
pub(crate) struct OpenBatchRow {
    pub(crate) id: i64,
    pub(crate) callback_id: Option<JobId>,
    pub(crate) open_secs: f64,
    pub(crate) pending: i64,
}

/// The `limit` batches open longest: [`LONGEST_OPEN_BATCHES`].
pub(crate) async fn longest_open_batches(
    pool: &PgPool,
    limit: i64,
) -> Result<Vec<OpenBatchRow>, sqlx::Error> {
    sqlx::query_as(LONGEST_OPEN_BATCHES)
        .bind(limit)
        .fetch_all(pool)
        .await
}
