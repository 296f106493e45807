//! Rescuing jobs whose lease expired: back to ready, or dead when their attempts are spent, or
//! cancelled when they were asked to stop (their run cannot say it succeeded any more).

use jobs_core::JobId;
use sqlx::{FromRow, PgPool};

/// The rescue of expired leases, for the rows that `$selection` picks among the running jobs
/// whose lease expired (see [`RESCUE_EXPIRED`] and [`RESCUE_JOBS`]). The jobs that end here
/// (dead or cancelled) move their workflows on in the same statement ([`workflow_steps!`]).
macro_rules! rescue_jobs {
    ($selection:literal) => {
        concat!(
            "
WITH expired AS (
    SELECT id FROM jobs_queue
    WHERE state = 'running' AND lease_expires_at < now()",
            $selection,
            "
    FOR UPDATE SKIP LOCKED
), rescued AS (
    UPDATE jobs_queue AS j
    SET state = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                     WHEN j.attempts >= j.max_attempts THEN 'dead'
                     ELSE 'ready' END,
        finished_at = CASE WHEN j.cancel_requested_at IS NOT NULL OR j.attempts >= j.max_attempts
                           THEN now() END,
        lease_token = NULL,
        lease_expires_at = NULL,
        errors = j.errors || jsonb_build_array(jsonb_build_object(
            'attempt', j.attempts, 'at', now(), 'kind', 'lease_expired',
            'error', 'lease expired: the worker stopped renewing it (crashed, paused or cut off)'))
    FROM expired
    WHERE j.id = expired.id
    RETURNING j.id, j.kind, j.queue, j.state, j.batch_id, j.has_dependents
), ",
            workflow_steps!("rescued", "'running'::text"),
            "
SELECT id, kind, queue, state FROM rescued
WHERE ",
            after_workflow_steps!()
        )
    };
}

/// Returns up to `$1` jobs whose lease expired to ready, or to dead when their attempts are used
/// up, or to cancelled when they were asked to stop, recording the expiry as that attempt's error; skips the jobs `$2` (rows this worker set
/// aside after the database refused to rescue them). A rescued job keeps its `run_at`, so it goes
/// before the jobs that became ready after it; one with a fairness key or a limit key takes its
/// key's next turn (migrations 22 and 23), behind its key's other ready jobs when claims take
/// turns.
pub const RESCUE_EXPIRED: &str = rescue_jobs!(
    "
      AND id <> ALL($2)
    ORDER BY lease_expires_at
    LIMIT $1"
);

/// The jobs [`RESCUE_EXPIRED`] would take (up to `$1`, skipping `$2`), without taking them: what
/// a rescue the database refused goes through one row at a time. Returns id, kind and queue.
pub const LIST_EXPIRED: &str = "
SELECT id, kind, queue FROM jobs_queue
WHERE state = 'running' AND lease_expires_at < now() AND id <> ALL($2)
ORDER BY lease_expires_at
LIMIT $1";

/// Rescues the jobs `$1` as [`RESCUE_EXPIRED`] does, those whose lease is still expired and that
/// no other rescue holds; returns what it returns.
pub const RESCUE_JOBS: &str = rescue_jobs!(
    "
      AND id = ANY($1)"
);

// ---------------------------------------------------------------------------------------------
// Operating the queue: health numbers, dead letters, retention (see `crate::admin`).
// ---------------------------------------------------------------------------------------------

/// A job returned by a rescue: its id, kind, queue and new state (`ready`, `dead` or
/// `cancelled`).
#[derive(Debug, Clone, FromRow, PartialEq, Eq)]
pub struct RescuedJob {
    /// The job's id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
    /// `ready`, or `dead` when its attempts were used up, or `cancelled` when it was asked to
    /// stop.
    pub state: String,
}

/// Returns up to `limit` jobs whose lease expired to ready (or dead when out of attempts, or
/// cancelled when asked to stop),
/// skipping the jobs `set_aside`.
pub async fn rescue_expired(
    pool: &PgPool,
    limit: usize,
    set_aside: &[JobId],
) -> Result<Vec<RescuedJob>, sqlx::Error> {
    sqlx::query_as(RESCUE_EXPIRED)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(set_aside)
        .fetch_all(pool)
        .await
}

/// A running job whose lease expired, not rescued yet: its id, kind and queue.
#[derive(Debug, Clone, FromRow, PartialEq, Eq)]
pub struct ExpiredJob {
    /// The job's id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
}

/// The jobs [`rescue_expired`] would take, without taking them.
pub async fn list_expired(
    pool: &PgPool,
    limit: usize,
    set_aside: &[JobId],
) -> Result<Vec<ExpiredJob>, sqlx::Error> {
    sqlx::query_as(LIST_EXPIRED)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(set_aside)
        .fetch_all(pool)
        .await
}

/// Rescues the jobs `ids` as [`rescue_expired`] does, those whose lease is still expired.
pub async fn rescue_jobs(pool: &PgPool, ids: &[JobId]) -> Result<Vec<RescuedJob>, sqlx::Error> {
    sqlx::query_as(RESCUE_JOBS).bind(ids).fetch_all(pool).await
}
