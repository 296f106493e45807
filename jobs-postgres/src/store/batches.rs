//! Batches: creating one, counting its members in chunks, adding members from a running member,
//! and reading how it ended.
//!
//! Members are counted per chunk of 64 consecutive ids (`jobs_batch_chunks`, migration 15):
//! the statements that end or re-open members move their chunks' counts (`jobs_workflow_steps`,
//! migration 17, once per chunk), and the deferred `jobs_batch_chunk_settle` closes and
//! re-opens chunks on the batch row at commit, ending the batch (and releasing its callback)
//! when its last chunk closes. This module writes the starting counts and reads them.

use chrono::{DateTime, Utc};
use jobs_core::JobId;
use sqlx::{FromRow, PgConnection, PgPool};
use uuid::Uuid;

/// Creates a batch with callback job `$1` (NULL for none), which waits from now on; returns the
/// batch's id. Its members are counted by [`OPEN_BATCH`].
pub const CREATE_BATCH: &str = "
WITH batch AS (
    INSERT INTO jobs_batches (callback_id) VALUES ($1) RETURNING id
), waiting AS (
    UPDATE jobs_queue SET state = 'waiting' WHERE id = $1 AND state = 'ready' RETURNING id
)
SELECT id FROM batch WHERE (SELECT count(*) FROM waiting) >= 0";

/// Counts the first members `$2` (ids) of batch `$1` in their chunks, all pending, and sets the
/// batch's open chunks; a batch without members has ended at once, and its callback is ready.
pub const OPEN_BATCH: &str = "
WITH chunks AS (
    INSERT INTO jobs_batch_chunks (batch_id, chunk, pending)
    SELECT $1, member / 64, count(*) FROM unnest($2::bigint[]) AS m(member) GROUP BY member / 64
    RETURNING chunk
), opened AS (
    UPDATE jobs_batches
    SET open_chunks = (SELECT count(*) FROM chunks),
        ended_at = CASE WHEN (SELECT count(*) FROM chunks) = 0 THEN now() END
    WHERE id = $1
    RETURNING open_chunks, callback_id
)
SELECT jobs_batch_ended(callback_id) FROM opened
WHERE open_chunks = 0 AND callback_id IS NOT NULL";

/// Locks running job `$1`, still held under lease token `$2`, against its outcome (`FOR SHARE`)
/// until the transaction ends, and returns its batch (NULL when it is in none). No row when the
/// lease no longer holds.
pub const LOCK_RUNNING_MEMBER: &str = "
SELECT batch_id FROM jobs_queue
WHERE id = $1 AND lease_token = $2 AND state = 'running'
FOR SHARE";

/// Counts members `$2` (ids), just added to batch `$1`, in their chunks: a new chunk, or one
/// that had closed, re-opens on the batch at commit (`jobs_batch_chunk_settle`).
pub const ADD_TO_CHUNKS: &str = "
INSERT INTO jobs_batch_chunks (batch_id, chunk, pending, closed)
SELECT $1, member / 64, count(*), true FROM unnest($2::bigint[]) AS m(member) GROUP BY member / 64
ON CONFLICT (batch_id, chunk) DO UPDATE SET pending = jobs_batch_chunks.pending + EXCLUDED.pending";

/// The counts of a batch, chosen by `$1` (the batch's id) or `$2` (its callback's id): when it
/// was created and ended, and its members pending, done, dead and cancelled.
pub const BATCH_COUNTS: &str = "
SELECT b.id, b.callback_id, b.created_at, b.ended_at,
       coalesce(sum(c.pending), 0)::int8 AS pending,
       coalesce(sum(c.done), 0)::int8 AS done,
       coalesce(sum(c.dead), 0)::int8 AS dead,
       coalesce(sum(c.cancelled), 0)::int8 AS cancelled
FROM jobs_batches AS b
LEFT JOIN jobs_batch_chunks AS c ON c.batch_id = b.id
WHERE b.id = $1 OR b.callback_id = $2
GROUP BY b.id";

/// The members of batch `$1` that ended dead or cancelled, by id, with their states.
pub const FAILED_MEMBERS: &str = "
SELECT id, state FROM jobs_queue
WHERE batch_id = $1 AND state IN ('dead', 'cancelled')
ORDER BY id";

/// A batch's counts, as [`BATCH_COUNTS`] returns them.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub(crate) struct BatchCounts {
    pub id: i64,
    pub callback_id: Option<JobId>,
    pub created_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    pub pending: i64,
    pub done: i64,
    pub dead: i64,
    pub cancelled: i64,
}

/// Creates a batch whose callback is `callback` (made waiting): [`CREATE_BATCH`].
pub(crate) async fn create_batch(
    conn: &mut PgConnection,
    callback: Option<JobId>,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(CREATE_BATCH)
        .bind(callback)
        .fetch_one(&mut *conn)
        .await
}

/// Counts the first `members` of `batch`: [`OPEN_BATCH`].
pub(crate) async fn open_batch(
    conn: &mut PgConnection,
    batch: i64,
    members: &[JobId],
) -> Result<(), sqlx::Error> {
    sqlx::query(OPEN_BATCH)
        .bind(batch)
        .bind(members)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// The batch of running job `id` under lease `token`, locked against the job's outcome until
/// the transaction ends: `None` when the lease no longer holds, `Some(None)` when the job is in
/// no batch. [`LOCK_RUNNING_MEMBER`].
pub(crate) async fn lock_running_member(
    conn: &mut PgConnection,
    id: JobId,
    token: Uuid,
) -> Result<Option<Option<i64>>, sqlx::Error> {
    sqlx::query_scalar(LOCK_RUNNING_MEMBER)
        .bind(id)
        .bind(token)
        .fetch_optional(&mut *conn)
        .await
}

/// Counts `members`, just added to `batch`: [`ADD_TO_CHUNKS`].
pub(crate) async fn add_to_chunks(
    conn: &mut PgConnection,
    batch: i64,
    members: &[JobId],
) -> Result<(), sqlx::Error> {
    sqlx::query(ADD_TO_CHUNKS)
        .bind(batch)
        .bind(members)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Which batch to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchOf {
    /// The batch of this id.
    Id(i64),
    /// The batch whose callback is this job.
    Callback(JobId),
}

/// The counts of a batch, if it exists: [`BATCH_COUNTS`].
pub(crate) async fn batch_counts(
    pool: &PgPool,
    which: BatchOf,
) -> Result<Option<BatchCounts>, sqlx::Error> {
    let (id, callback) = match which {
        BatchOf::Id(id) => (Some(id), None),
        BatchOf::Callback(callback) => (None, Some(callback)),
    };
    sqlx::query_as(BATCH_COUNTS)
        .bind(id)
        .bind(callback)
        .fetch_optional(pool)
        .await
}

/// The members of `batch` that ended dead or cancelled: [`FAILED_MEMBERS`].
pub(crate) async fn failed_members(
    pool: &PgPool,
    batch: i64,
) -> Result<Vec<(JobId, String)>, sqlx::Error> {
    sqlx::query_as(FAILED_MEMBERS)
        .bind(batch)
        .fetch_all(pool)
        .await
}
