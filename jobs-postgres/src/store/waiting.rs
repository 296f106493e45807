//! Jobs waiting for their time: bringing a scheduled retry or a delayed job forward.

use jobs_core::JobId;
use sqlx::PgPool;

/// Makes the jobs of ids `$1` that wait for a later `run_at` (state `ready`) due now, and
/// announces each of their queues once; jobs in any other state, or already due, are left
/// alone. Returns the jobs made due, by id.
pub const RUN_NOW: &str = "
WITH made_due AS (
    UPDATE jobs_queue
    SET run_at = now()
    WHERE id = ANY($1::int8[]) AND state = 'ready' AND run_at > now()
    RETURNING id, kind, queue
), announced AS (
    SELECT pg_notify('jobs_queue', queue) FROM (SELECT DISTINCT queue FROM made_due) AS queues
)
SELECT id, kind, queue FROM made_due
WHERE (SELECT count(*) FROM announced) >= 0
ORDER BY id";

/// A job [`RUN_NOW`] made due.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct MadeDue {
    pub(crate) id: JobId,
    pub(crate) kind: String,
    pub(crate) queue: String,
}

/// Makes the waiting jobs among `ids` due now: [`RUN_NOW`].
pub(crate) async fn run_now(pool: &PgPool, ids: &[JobId]) -> Result<Vec<MadeDue>, sqlx::Error> {
    sqlx::query_as(RUN_NOW).bind(ids).fetch_all(pool).await
}
