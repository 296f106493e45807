//! Pausing and resuming queues: rows of `jobs_queue_pauses`, which every claim checks (see
//! `queue_not_paused!` in [`super::claims`]).

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgPool};

/// Pauses queue `$1`, recording who (`$2`) and why (`$3`, may be NULL); a queue already paused
/// keeps its first pause. Returns the pause's time when this statement paused the queue, no row
/// when it was paused already.
pub const PAUSE_QUEUE: &str = "
INSERT INTO jobs_queue_pauses (queue, paused_by, reason)
VALUES ($1, $2, $3)
ON CONFLICT (queue) DO NOTHING
RETURNING paused_at";

/// Resumes queue `$1`: deletes its pause and announces the queue on the `jobs_queue` channel,
/// so that idle workers claim its ready jobs at once instead of at their next poll. Returns how
/// long it had been paused, in seconds; no row when it was not paused.
pub const RESUME_QUEUE: &str = "
WITH resumed AS (
    DELETE FROM jobs_queue_pauses WHERE queue = $1
    RETURNING queue, paused_at
)
SELECT extract(epoch FROM now() - paused_at)::float8 AS paused_secs
FROM resumed
WHERE (SELECT count(*) FROM (SELECT pg_notify('jobs_queue', queue) FROM resumed) AS announced) >= 0";

/// Every paused queue, by name, with how long it has been paused (seconds).
pub const LIST_PAUSES: &str = "
SELECT queue, paused_at, paused_by, reason,
       extract(epoch FROM now() - paused_at)::float8 AS paused_secs
FROM jobs_queue_pauses
ORDER BY queue";

/// A paused queue, as [`LIST_PAUSES`] returns it.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct PauseRow {
    pub(crate) queue: String,
    pub(crate) paused_at: DateTime<Utc>,
    pub(crate) paused_by: String,
    pub(crate) reason: Option<String>,
    pub(crate) paused_secs: f64,
}

/// Pauses `queue`: [`PAUSE_QUEUE`]. `None` when it was paused already.
pub(crate) async fn pause_queue(
    pool: &PgPool,
    queue: &str,
    paused_by: &str,
    reason: Option<&str>,
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar(PAUSE_QUEUE)
        .bind(queue)
        .bind(paused_by)
        .bind(reason)
        .fetch_optional(pool)
        .await
}

/// Resumes `queue`: [`RESUME_QUEUE`]. The seconds it was paused; `None` when it was not.
pub(crate) async fn resume_queue(pool: &PgPool, queue: &str) -> Result<Option<f64>, sqlx::Error> {
    sqlx::query_scalar(RESUME_QUEUE)
        .bind(queue)
        .fetch_optional(pool)
        .await
}

/// Every paused queue: [`LIST_PAUSES`].
pub(crate) async fn list_pauses(pool: &PgPool) -> Result<Vec<PauseRow>, sqlx::Error> {
    sqlx::query_as(LIST_PAUSES).fetch_all(pool).await
}
