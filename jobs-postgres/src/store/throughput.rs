//! Throughput: runs ended per minute, queue and kind, in `jobs_throughput`. Each worker process
//! adds the counts it gathered in memory to its own rows (keyed by its id), so no two processes
//! write one row; readers sum over workers.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgPool};
use uuid::Uuid;

/// Adds counts to worker `$1`'s rows of the current minute (database clock). Arrays, one
/// element per queue and kind: `$2` queues, `$3` kinds, `$4` done, `$5` retried, `$6` dead,
/// `$7` cancelled.
pub const ADD_THROUGHPUT: &str = "
INSERT INTO jobs_throughput AS t (minute, queue, kind, worker_id, done, retried, dead, cancelled)
SELECT date_trunc('minute', now()), c.queue, c.kind, $1, c.done, c.retried, c.dead, c.cancelled
FROM unnest($2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[])
     AS c(queue, kind, done, retried, dead, cancelled)
ON CONFLICT (minute, queue, kind, worker_id) DO UPDATE
SET done = t.done + excluded.done,
    retried = t.retried + excluded.retried,
    dead = t.dead + excluded.dead,
    cancelled = t.cancelled + excluded.cancelled";

/// The runs ended in each minute that began less than `$1` seconds ago, per queue and kind,
/// summed over workers, by minute, queue and kind. Reads the primary key's range of those
/// minutes only.
pub const THROUGHPUT: &str = "
SELECT minute, queue, kind,
       sum(done)::bigint AS done, sum(retried)::bigint AS retried,
       sum(dead)::bigint AS dead, sum(cancelled)::bigint AS cancelled
FROM jobs_throughput
WHERE minute > now() - make_interval(secs => $1)
GROUP BY minute, queue, kind
ORDER BY minute, queue, kind";

/// Deletes up to `$2` throughput rows of minutes that began more than `$1` seconds ago, oldest
/// first, if this statement gets the retention lock `$3`. Returns whether the lock was had, and
/// how many rows were deleted.
pub const PRUNE_THROUGHPUT: &str = "
WITH retention_lock AS (
    SELECT pg_try_advisory_xact_lock($3) AS held
), deleted AS (
    DELETE FROM jobs_throughput
    WHERE (SELECT held FROM retention_lock)
      AND (minute, queue, kind, worker_id) IN (
        SELECT minute, queue, kind, worker_id FROM jobs_throughput
        WHERE minute < now() - make_interval(secs => $1)
        ORDER BY minute
        LIMIT $2)
    RETURNING 1
)
SELECT (SELECT held FROM retention_lock) AS locked, count(*) AS deleted FROM deleted";

/// The runs of one queue and kind that ended, by outcome, to add to a worker's rows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) queue: String,
    pub(crate) kind: String,
    pub(crate) done: i64,
    pub(crate) retried: i64,
    pub(crate) dead: i64,
    pub(crate) cancelled: i64,
}

/// One minute of one queue and kind, as [`THROUGHPUT`] returns it.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct ThroughputRow {
    pub(crate) minute: DateTime<Utc>,
    pub(crate) queue: String,
    pub(crate) kind: String,
    pub(crate) done: i64,
    pub(crate) retried: i64,
    pub(crate) dead: i64,
    pub(crate) cancelled: i64,
}

/// Adds `tallies` to worker `worker`'s rows of the current minute: [`ADD_THROUGHPUT`].
pub(crate) async fn add_throughput(
    pool: &PgPool,
    worker: Uuid,
    tallies: &[Tally],
) -> Result<(), sqlx::Error> {
    let column = |field: fn(&Tally) -> i64| tallies.iter().map(field).collect::<Vec<i64>>();
    sqlx::query(ADD_THROUGHPUT)
        .bind(worker)
        .bind(tallies.iter().map(|t| t.queue.as_str()).collect::<Vec<_>>())
        .bind(tallies.iter().map(|t| t.kind.as_str()).collect::<Vec<_>>())
        .bind(column(|t| t.done))
        .bind(column(|t| t.retried))
        .bind(column(|t| t.dead))
        .bind(column(|t| t.cancelled))
        .execute(pool)
        .await?;
    Ok(())
}

/// The minutes that began within `window`: [`THROUGHPUT`].
pub(crate) async fn throughput(
    pool: &PgPool,
    window: Duration,
) -> Result<Vec<ThroughputRow>, sqlx::Error> {
    sqlx::query_as(THROUGHPUT)
        .bind(window.as_secs_f64())
        .fetch_all(pool)
        .await
}

/// Deletes up to `limit` rows of minutes older than `max_age`, if the retention lock is free:
/// [`PRUNE_THROUGHPUT`].
pub(crate) async fn prune_throughput(
    pool: &PgPool,
    max_age: Duration,
    limit: i64,
) -> Result<super::retention::PrunedRows, sqlx::Error> {
    sqlx::query_as(PRUNE_THROUGHPUT)
        .bind(max_age.as_secs_f64())
        .bind(limit)
        .bind(super::retention::RETENTION_LOCK_KEY)
        .fetch_one(pool)
        .await
}
