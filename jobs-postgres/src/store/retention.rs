//! Retention: deleting finished jobs, published outbox rows and expired processed keys.

use std::time::Duration;

use sqlx::{FromRow, PgPool};

/// Advisory lock key that lets one process prune at a time (`"jobs_ret"` as bytes).
pub const RETENTION_LOCK_KEY: i64 = 0x6a6f_6273_5f72_6574;

/// Deletes up to `$2` done and cancelled jobs finished more than `$1` seconds ago, oldest
/// first, if this statement gets the retention lock `$3`; dead jobs are never touched.
///
/// One statement, its own transaction: the lock is taken with `pg_try_advisory_xact_lock`
/// first and released at commit, so only one process deletes at a time and none waits.
/// Returns whether the lock was had, and how many done and cancelled jobs were deleted.
pub const PRUNE_FINISHED: &str = "
WITH retention_lock AS (
    SELECT pg_try_advisory_xact_lock($3) AS held
), deleted AS (
    DELETE FROM jobs_queue
    WHERE (SELECT held FROM retention_lock)
      AND id IN (
        SELECT id FROM jobs_queue
        WHERE state IN ('done', 'cancelled')
          AND finished_at < now() - make_interval(secs => $1)
        ORDER BY finished_at
        LIMIT $2)
    RETURNING state
)
SELECT (SELECT held FROM retention_lock) AS locked,
       count(*) FILTER (WHERE state = 'done') AS done,
       count(*) FILTER (WHERE state = 'cancelled') AS cancelled
FROM deleted";

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
/// `$1` seconds ago, expired processed keys, and outbox rows published more than `$1` seconds ago
/// (the selections of [`PRUNE_FINISHED`], [`PRUNE_PROCESSED_KEYS`] and
/// [`PRUNE_PUBLISHED_OUTBOX`], without their batch limits).
pub const COUNT_PRUNABLE: &str = "
SELECT (SELECT count(*) FROM jobs_queue
        WHERE state = 'done' AND finished_at < now() - make_interval(secs => $1)) AS done,
       (SELECT count(*) FROM jobs_queue
        WHERE state = 'cancelled' AND finished_at < now() - make_interval(secs => $1))
           AS cancelled,
       (SELECT count(*) FROM jobs_processed_keys WHERE expires_at <= now()) AS processed_keys,
       (SELECT count(*) FROM jobs_outbox
        WHERE state = 'published' AND published_at < now() - make_interval(secs => $1))
           AS outbox";

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

/// What [`PRUNE_FINISHED`] did: whether it had the retention lock, and the jobs it deleted.
#[derive(FromRow)]
pub(crate) struct PrunedJobs {
    pub(crate) locked: bool,
    pub(crate) done: i64,
    pub(crate) cancelled: i64,
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

/// Deletes up to `limit` done and cancelled jobs finished more than `max_age` ago, if the
/// retention lock is free.
pub(crate) async fn prune_finished(
    pool: &PgPool,
    max_age: Duration,
    limit: i64,
) -> Result<PrunedJobs, sqlx::Error> {
    sqlx::query_as(PRUNE_FINISHED)
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
