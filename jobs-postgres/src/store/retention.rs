//! Retention: deleting finished jobs, published outbox rows and expired processed keys.

use std::time::Duration;

use sqlx::{FromRow, PgPool};

use super::transactions;

/// Advisory lock key that lets one process prune at a time (`"jobs_ret"` as bytes).
pub const RETENTION_LOCK_KEY: i64 = 0x6a6f_6273_5f72_6574;

/// The states of a job that has not ended, as a SQL list.
macro_rules! not_ended {
    () => {
        "('waiting', 'ready', 'running')"
    };
}

/// Whether finished job `j` must be kept for its workflow: some dependent of it has not ended
/// (it may read this job's output), or it is a member of a batch that has not ended or whose
/// callback has not ended.
///
/// Each test is a probe per candidate, through primary keys, taken only for the rows it
/// concerns (`has_dependents`, `batch_id`): `OFFSET 0` keeps the planner from turning an
/// `EXISTS` into a hashed subplan, which would read every dependency (or every pending job)
/// for each statement.
macro_rules! kept_for_workflow {
    () => {
        concat!(
            "(j.has_dependents AND EXISTS (
                SELECT FROM jobs_dependencies AS e JOIN jobs_queue AS d ON d.id = e.dependent_id
                WHERE e.prerequisite_id = j.id AND d.state IN ",
            not_ended!(),
            "
                OFFSET 0))
          OR (j.batch_id IS NOT NULL AND EXISTS (
                SELECT FROM jobs_batches AS b
                LEFT JOIN jobs_queue AS c ON c.id = b.callback_id
                WHERE b.id = j.batch_id AND (b.ended_at IS NULL OR c.state IN ",
            not_ended!(),
            ")
                OFFSET 0))"
        )
    };
}

/// Locks up to `$2` done and cancelled jobs finished more than `$1` seconds ago, oldest first,
/// that no workflow needs (see `kept_for_workflow!`), if this statement gets the retention lock
/// `$3`; dead jobs are never selected. Rows another transaction has locked are skipped: an
/// enqueue locks the jobs it is to run after until it commits. Returns whether the lock was
/// had, and the ids locked (until the transaction ends), for [`PRUNE_FINISHED`].
pub const LOCK_PRUNABLE: &str = concat!(
    "
WITH retention_lock AS (
    SELECT pg_try_advisory_xact_lock($3) AS held
)
SELECT (SELECT held FROM retention_lock) AS locked,
       ARRAY(
           SELECT j.id FROM jobs_queue AS j
           WHERE (SELECT held FROM retention_lock)
             AND j.state IN ('done', 'cancelled')
             AND j.finished_at < now() - make_interval(secs => $1)
             AND NOT (",
    kept_for_workflow!(),
    ")
           ORDER BY j.finished_at
           LIMIT $2
           FOR UPDATE OF j SKIP LOCKED) AS ids"
);

/// Deletes the done and cancelled jobs among `$1` (ids that [`LOCK_PRUNABLE`] locked in this
/// transaction) that no workflow needs, judged again now: a dependent enqueued after one of
/// them and committed since the lock was taken keeps it. The dependency rows of the deleted
/// jobs (those naming them as the dependent) go with them. Returns how many done and cancelled
/// jobs were deleted.
///
/// Locking first, then judging in a later statement, is what makes an enqueue and a prune
/// meet: an enqueue that locked a job first makes the lock skip it; one that commits before the
/// delete is seen by it; one that comes later waits for the prune to commit, then finds the job
/// gone and refuses to depend on it.
///
/// Jobs kept for their workflow are examined again by every run until it has ended, one or two
/// primary-key probes each.
pub const PRUNE_FINISHED: &str = concat!(
    "
WITH deleted AS (
    DELETE FROM jobs_queue AS j
    WHERE j.id = ANY($1::int8[])
      AND j.state IN ('done', 'cancelled')
      AND NOT (",
    kept_for_workflow!(),
    ")
    RETURNING j.state, j.id, j.prerequisites_left IS NOT NULL AS dependent
), dependencies AS (
    DELETE FROM jobs_dependencies
    WHERE dependent_id IN (SELECT id FROM deleted WHERE dependent)
)
SELECT count(*) FILTER (WHERE state = 'done') AS done,
       count(*) FILTER (WHERE state = 'cancelled') AS cancelled
FROM deleted"
);

/// Deletes up to `$2` batches (their `jobs_batches` row and their chunks) that ended more than
/// `$1` seconds ago, whose callback is gone and of which no member remains, oldest first, if
/// this statement gets the retention lock `$3`. Returns whether the lock was had, and how many
/// batches were deleted.
///
/// A batch whose members or callback are kept (a dead member, say) is examined again by every
/// run, two index probes.
pub const PRUNE_BATCHES: &str = "
WITH retention_lock AS (
    SELECT pg_try_advisory_xact_lock($3) AS held
), gone AS (
    SELECT b.id FROM jobs_batches AS b
    WHERE (SELECT held FROM retention_lock)
      AND b.ended_at < now() - make_interval(secs => $1)
      AND NOT EXISTS (SELECT FROM jobs_queue AS c WHERE c.id = b.callback_id OFFSET 0)
      AND NOT EXISTS (SELECT FROM jobs_queue AS m WHERE m.batch_id = b.id OFFSET 0)
    ORDER BY b.ended_at
    LIMIT $2
), chunks AS (
    DELETE FROM jobs_batch_chunks WHERE batch_id IN (SELECT id FROM gone)
), deleted AS (
    DELETE FROM jobs_batches WHERE id IN (SELECT id FROM gone) RETURNING 1
)
SELECT (SELECT held FROM retention_lock) AS locked, count(*) AS deleted FROM deleted";

/// Deletes up to `$2` outbox rows published more than `$1` seconds ago, oldest first, if this
/// statement gets the retention lock `$3`; pending and parked rows are never touched. Returns
/// whether the lock was had, and how many rows were deleted.
pub const PRUNE_PUBLISHED_OUTBOX: &str = "
WITH retention_lock AS (
    SELECT pg_try_advisory_xact_lock($3) AS held
), deleted AS (
    DELETE FROM jobs_outbox
    WHERE (SELECT held FROM retention_lock)
      AND id IN (
        SELECT id FROM jobs_outbox
        WHERE state = 'published'
          AND published_at < now() - make_interval(secs => $1)
        ORDER BY published_at
        LIMIT $2)
    RETURNING 1
)
SELECT (SELECT held FROM retention_lock) AS locked, count(*) AS deleted FROM deleted";

/// What retention would delete now, changing nothing: done and cancelled jobs finished more than
/// `$1` seconds ago that no workflow needs, expired processed keys, and outbox rows published
/// more than `$1` seconds ago (the selections of [`PRUNE_FINISHED`], [`PRUNE_PROCESSED_KEYS`]
/// and [`PRUNE_PUBLISHED_OUTBOX`], without their batch limits).
pub const COUNT_PRUNABLE: &str = concat!(
    "
SELECT prunable.done, prunable.cancelled,
       (SELECT count(*) FROM jobs_processed_keys WHERE expires_at <= now()) AS processed_keys,
       (SELECT count(*) FROM jobs_outbox
        WHERE state = 'published' AND published_at < now() - make_interval(secs => $1))
           AS outbox
FROM (
    SELECT count(*) FILTER (WHERE j.state = 'done') AS done,
           count(*) FILTER (WHERE j.state = 'cancelled') AS cancelled
    FROM jobs_queue AS j
    WHERE j.state IN ('done', 'cancelled')
      AND j.finished_at < now() - make_interval(secs => $1)
      AND NOT (",
    kept_for_workflow!(),
    ")
) AS prunable"
);

/// Deletes up to `$1` expired processed keys, if this statement gets the retention lock `$2`.
/// Returns whether the lock was had, and how many keys were deleted.
pub const PRUNE_PROCESSED_KEYS: &str = "
WITH retention_lock AS (
    SELECT pg_try_advisory_xact_lock($2) AS held
), deleted AS (
    DELETE FROM jobs_processed_keys
    WHERE (SELECT held FROM retention_lock)
      AND key_digest IN (
        SELECT key_digest FROM jobs_processed_keys
        WHERE expires_at <= now()
        ORDER BY expires_at
        LIMIT $1)
    RETURNING 1
)
SELECT (SELECT held FROM retention_lock) AS locked, count(*) AS deleted FROM deleted";

/// What [`prune_finished`] did: whether it had the retention lock, the jobs it deleted, and
/// how many it had locked to delete (a full batch means more may be waiting).
pub(crate) struct PrunedJobs {
    pub(crate) locked: bool,
    pub(crate) done: i64,
    pub(crate) cancelled: i64,
    pub(crate) examined: i64,
}

/// What a retention statement of keys or rows did: whether it had the lock, and how many it
/// deleted.
#[derive(FromRow)]
pub(crate) struct PrunedRows {
    pub(crate) locked: bool,
    pub(crate) deleted: i64,
}

/// What retention would delete now, counted.
#[derive(FromRow)]
pub(crate) struct Prunable {
    pub(crate) done: i64,
    pub(crate) cancelled: i64,
    pub(crate) processed_keys: i64,
    pub(crate) outbox: i64,
}

/// Counts what retention with `max_age` would delete now.
pub(crate) async fn count_prunable(
    pool: &PgPool,
    max_age: Duration,
) -> Result<Prunable, sqlx::Error> {
    sqlx::query_as(COUNT_PRUNABLE)
        .bind(max_age.as_secs_f64())
        .fetch_one(pool)
        .await
}

/// Deletes up to `limit` done and cancelled jobs finished more than `max_age` ago that no
/// workflow needs, if the retention lock is free: [`LOCK_PRUNABLE`], then [`PRUNE_FINISHED`],
/// in one transaction.
pub(crate) async fn prune_finished(
    pool: &PgPool,
    max_age: Duration,
    limit: i64,
) -> Result<PrunedJobs, sqlx::Error> {
    let mut transaction = transactions::begin_on(pool).await?;
    let (locked, ids): (bool, Vec<i64>) = sqlx::query_as(LOCK_PRUNABLE)
        .bind(max_age.as_secs_f64())
        .bind(limit)
        .bind(RETENTION_LOCK_KEY)
        .fetch_one(&mut *transaction)
        .await?;
    let (done, cancelled): (i64, i64) = if ids.is_empty() {
        (0, 0)
    } else {
        sqlx::query_as(PRUNE_FINISHED)
            .bind(&ids)
            .fetch_one(&mut *transaction)
            .await?
    };
    transaction.commit().await?;
    Ok(PrunedJobs {
        locked,
        done,
        cancelled,
        examined: i64::try_from(ids.len()).unwrap_or(i64::MAX),
    })
}

/// Deletes up to `limit` batches that ended more than `max_age` ago and whose callback and
/// members are gone, if the retention lock is free: [`PRUNE_BATCHES`].
pub(crate) async fn prune_batches(
    pool: &PgPool,
    max_age: Duration,
    limit: i64,
) -> Result<PrunedRows, sqlx::Error> {
    sqlx::query_as(PRUNE_BATCHES)
        .bind(max_age.as_secs_f64())
        .bind(limit)
        .bind(RETENTION_LOCK_KEY)
        .fetch_one(pool)
        .await
}

/// Deletes up to `limit` expired processed keys, if the retention lock is free.
pub(crate) async fn prune_processed_keys(
    pool: &PgPool,
    limit: i64,
) -> Result<PrunedRows, sqlx::Error> {
    sqlx::query_as(PRUNE_PROCESSED_KEYS)
        .bind(limit)
        .bind(RETENTION_LOCK_KEY)
        .fetch_one(pool)
        .await
}

/// Deletes up to `limit` outbox rows published more than `max_age` ago, if the retention lock
/// is free.
pub(crate) async fn prune_published_outbox(
    pool: &PgPool,
    max_age: Duration,
    limit: i64,
) -> Result<PrunedRows, sqlx::Error> {
    sqlx::query_as(PRUNE_PUBLISHED_OUTBOX)
        .bind(max_age.as_secs_f64())
        .bind(limit)
        .bind(RETENTION_LOCK_KEY)
        .fetch_one(pool)
        .await
}
