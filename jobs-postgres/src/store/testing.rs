//! What the test helpers of [`crate::testing`] read: the jobs waiting to run, as a test sees
//! them on its own connection (inside its own open transaction, when it has one), and the queues
//! that hold due jobs of given kinds.

use chrono::{DateTime, Utc};
use jobs_core::JobId;
use sqlx::{FromRow, PgConnection, PgPool};

/// The jobs waiting to run (state `ready`, due now or scheduled for later) of kind `$1`, or of
/// every kind when `$1` is NULL, in the order they were enqueued (by id), with their payloads as
/// JSON text.
pub const WAITING_JOBS: &str = "
SELECT id, kind, queue, priority, run_at, payload::text AS payload
FROM jobs_queue
WHERE state = 'ready' AND ($1::text IS NULL OR kind = $1)
ORDER BY id";

/// The queues holding jobs of kinds `$1` that are ready and due now, by name.
pub const QUEUES_WITH_DUE_JOBS: &str = "
SELECT DISTINCT queue
FROM jobs_queue
WHERE state = 'ready' AND kind = ANY($1::text[]) AND run_at <= now()
ORDER BY queue";

/// A job waiting to run, as [`WAITING_JOBS`] returns it.
#[derive(Debug, Clone, FromRow)]
pub struct WaitingJob {
    /// The job's id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
    /// Its priority.
    pub priority: i16,
    /// When it is due.
    pub run_at: DateTime<Utc>,
    /// The encoded arguments, as JSON text.
    pub payload: String,
}

/// The jobs waiting to run that `conn` sees, of `kind` or of every kind, by id.
pub async fn waiting_jobs(
    conn: &mut PgConnection,
    kind: Option<&str>,
) -> Result<Vec<WaitingJob>, sqlx::Error> {
    sqlx::query_as(WAITING_JOBS)
        .bind(kind)
        .fetch_all(conn)
        .await
}

/// The queues holding jobs of `kinds` that are ready and due now, by name.
pub async fn queues_with_due_jobs(
    pool: &PgPool,
    kinds: &[&str],
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(QUEUES_WITH_DUE_JOBS)
        .bind(kinds)
        .fetch_all(pool)
        .await
}
