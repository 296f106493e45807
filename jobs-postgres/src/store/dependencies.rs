//! Enqueueing a job that runs after others: its prerequisites are locked, their states read,
//! and the job inserted waiting, ready or cancelled accordingly, with one dependency row per
//! prerequisite.
//!
//! The job then changes state in the transactions that end its prerequisites, each of which
//! hands them to `jobs_workflow_steps` (migration 17): this module only writes the starting
//! point. Locking each prerequisite's row (`FOR NO KEY UPDATE`, in id order) until the
//! enqueuing transaction ends is what makes the two meet: a prerequisite ending at the same time
//! either ends first (the lock waits for it, and its new state is read) or waits for the enqueue
//! to commit (and then its workflow step finds the new dependency row).

use std::collections::HashSet;

use jobs_core::{JobId, NewJob};
use sqlx::types::Json;
use sqlx::PgConnection;

use super::enqueue::bind_job_columns;

/// Inserts a job that runs after the jobs `$12` (ids, any order), each with its `$13` behaviour
/// on failure (`cancel`, `run`); `$1`..`$11` are the job's columns as in
/// [`INSERT_DEDUPED_JOB`](super::enqueue::INSERT_DEDUPED_JOB).
///
/// The prerequisites found are locked in id order and marked `has_dependents`. The job is
/// inserted only when every prerequisite was found: `cancelled` (finished, naming the
/// prerequisite) when one has already ended dead or cancelled with `cancel`; else `waiting`
/// while any has not ended; else `ready`, and announced when due. A dedupe key already held
/// inserts nothing. Returns one row: how many prerequisites were found, and the new job's id
/// and state (NULL when nothing was inserted).
pub const INSERT_DEPENDENT_JOB: &str = "
WITH wanted AS (
    SELECT * FROM unnest($12::bigint[], $13::text[]) AS w(prerequisite_id, on_failure)
), prerequisites AS (
    SELECT j.id, j.state, wanted.on_failure
    FROM wanted JOIN jobs_queue AS j ON j.id = wanted.prerequisite_id
    ORDER BY j.id
    FOR NO KEY UPDATE OF j
), marked AS (
    UPDATE jobs_queue AS j SET has_dependents = true
    FROM prerequisites AS p
    WHERE j.id = p.id AND NOT j.has_dependents
), verdict AS (
    SELECT count(*) AS found,
           count(*) FILTER (WHERE state NOT IN ('done', 'dead', 'cancelled')) AS pending,
           (array_agg(id ORDER BY id)
               FILTER (WHERE state IN ('dead', 'cancelled') AND on_failure = 'cancel'))[1]
               AS failed_id,
           (array_agg(state ORDER BY id)
               FILTER (WHERE state IN ('dead', 'cancelled') AND on_failure = 'cancel'))[1]
               AS failed_state
    FROM prerequisites
), inserted AS (
    INSERT INTO jobs_queue (kind, queue, payload, priority, max_attempts, run_at, dedupe_key,
                            dedupe_scope, fair_key, limit_key, state, prerequisites_left, finished_at,
                            cancelled_by_prerequisite, cancel_reason, errors)
    SELECT $1, $2, $3, $4, $5,
           COALESCE(to_timestamp($6), now() + make_interval(secs => $7)), $8, $9, $10, $11,
           CASE WHEN v.failed_id IS NOT NULL THEN 'cancelled'
                WHEN v.pending > 0 THEN 'waiting'
                ELSE 'ready' END,
           v.pending,
           CASE WHEN v.failed_id IS NOT NULL THEN now() END,
           v.failed_id,
           CASE WHEN v.failed_id IS NOT NULL
                THEN format('prerequisite job %s ended %s', v.failed_id, v.failed_state) END,
           CASE WHEN v.failed_id IS NOT NULL
                THEN jsonb_build_array(jsonb_build_object(
                    'attempt', 0, 'at', now(), 'kind', 'cancelled',
                    'error', format('prerequisite job %s ended %s', v.failed_id, v.failed_state)))
                ELSE '[]'::jsonb END
    FROM verdict AS v
    WHERE v.found = cardinality($12::bigint[])
    ON CONFLICT DO NOTHING
    RETURNING id, state, queue, run_at <= now() AS due
), dependencies AS (
    INSERT INTO jobs_dependencies (prerequisite_id, dependent_id, on_failure)
    SELECT p.id, i.id, p.on_failure FROM prerequisites AS p CROSS JOIN inserted AS i
), announced AS (
    SELECT pg_notify('jobs_queue', queue) FROM inserted WHERE state = 'ready' AND due
)
SELECT (SELECT found FROM verdict) AS found, i.id, i.state
FROM (SELECT 1) AS one LEFT JOIN inserted AS i ON true
WHERE (SELECT count(*) FROM announced) >= 0";

/// What [`insert_dependent_job`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DependentInsert {
    /// The job was inserted, in this state (`waiting`, `ready` or `cancelled`).
    Inserted(JobId, String),
    /// Its dedupe key is held by another job: nothing was written.
    DedupeHeld,
    /// Some prerequisites do not exist: nothing was written.
    Missing,
}

/// Inserts `job`, which has prerequisites, on `conn`: [`INSERT_DEPENDENT_JOB`].
pub(crate) async fn insert_dependent_job(
    conn: &mut PgConnection,
    job: &NewJob,
) -> Result<DependentInsert, sqlx::Error> {
    let prerequisites: Vec<JobId> = job.after.iter().map(|dependency| dependency.job).collect();
    let on_failure: Vec<&str> = job
        .after
        .iter()
        .map(|dependency| dependency.on_failure.as_str())
        .collect();
    let (found, id, state): (i64, Option<JobId>, Option<String>) =
        bind_job_columns!(sqlx::query_as(INSERT_DEPENDENT_JOB), job)
            .bind(&prerequisites)
            .bind(&on_failure)
            .fetch_one(&mut *conn)
            .await?;
    Ok(match (id, state) {
        (Some(id), Some(state)) => DependentInsert::Inserted(id, state),
        _ if usize::try_from(found).ok() != Some(prerequisites.len()) => DependentInsert::Missing,
        _ => DependentInsert::DedupeHeld,
    })
}

/// Of the jobs `$1`, those that exist.
pub const EXISTING_JOBS: &str = "SELECT id FROM jobs_queue WHERE id = ANY($1::bigint[])";

/// Locks the jobs `$1` that exist against removal (`FOR KEY SHARE`, which lets their states
/// change), in id order, until the transaction ends; returns their ids.
pub const LOCK_PREREQUISITES: &str = "
SELECT id FROM jobs_queue WHERE id = ANY($1::bigint[]) ORDER BY id FOR KEY SHARE";

/// Of `ids`, those that no job has: [`EXISTING_JOBS`].
pub(crate) async fn missing_jobs(
    conn: &mut PgConnection,
    ids: &[JobId],
) -> Result<Vec<JobId>, sqlx::Error> {
    let existing: Vec<JobId> = sqlx::query_scalar(EXISTING_JOBS)
        .bind(ids)
        .fetch_all(&mut *conn)
        .await?;
    Ok(absent(ids, &existing))
}

/// Locks the jobs of `ids` that exist against removal until the transaction of `conn` ends;
/// returns the ids that no job has: [`LOCK_PREREQUISITES`].
pub(crate) async fn lock_prerequisites(
    conn: &mut PgConnection,
    ids: &[JobId],
) -> Result<Vec<JobId>, sqlx::Error> {
    let existing: Vec<JobId> = sqlx::query_scalar(LOCK_PREREQUISITES)
        .bind(ids)
        .fetch_all(&mut *conn)
        .await?;
    Ok(absent(ids, &existing))
}

fn absent(ids: &[JobId], existing: &[JobId]) -> Vec<JobId> {
    let existing: HashSet<JobId> = existing.iter().copied().collect();
    ids.iter()
        .copied()
        .filter(|id| !existing.contains(id))
        .collect()
}
