//! Live workers: one row of `jobs_workers` per worker process, written and refreshed by the
//! process itself, deleted when it stops gracefully; a row not refreshed for its `gone_after`
//! belongs to a worker that is gone.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::types::Json;
use sqlx::{FromRow, PgPool};
use uuid::Uuid;

/// Records worker `$1` as live now: its host `$2`, pid `$3`, crate version `$4`, queues `$5`
/// (`[{queue, concurrency}]`), kinds `$6`, started at `$7` (NULL: now, for its first record),
/// gone once not refreshed for `$8` seconds, and enforcing the limits `$9` (`[{kind,
/// max_running, rate_jobs, rate_window_secs}]`). A row that exists already keeps its start and
/// is seen now. In the same statement, deletes the rows of other workers that are gone. Returns
/// the worker's start.
pub const RECORD_PRESENCE: &str = "
WITH gone AS (
    DELETE FROM jobs_workers
    WHERE id <> $1 AND last_seen_at + gone_after < now()
)
INSERT INTO jobs_workers (id, host, pid, version, queues, kinds, started_at, last_seen_at,
                          gone_after, limits)
VALUES ($1, $2, $3, $4, $5, $6, coalesce($7, now()), now(), make_interval(secs => $8), $9)
ON CONFLICT (id) DO UPDATE
SET last_seen_at = now(), gone_after = excluded.gone_after
RETURNING started_at";

/// Deletes the row of worker `$1`, which is stopping.
pub const FORGET_WORKER: &str = "DELETE FROM jobs_workers WHERE id = $1";

/// Every live worker (seen within its `gone_after`), by host, then start, with how long ago it
/// was last seen (seconds).
pub const LIVE_WORKERS: &str = "
SELECT id, host, pid, version, queues, kinds, started_at, last_seen_at, limits,
       extract(epoch FROM now() - last_seen_at)::float8 AS seen_secs_ago
FROM jobs_workers
WHERE last_seen_at + gone_after >= now()
ORDER BY host, started_at, id";

/// One queue of a worker, as the `queues` column holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct QueueSlots {
    pub(crate) queue: String,
    pub(crate) concurrency: u64,
}

/// The limits a worker enforces on one kind, as the `limits` column holds them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct DeclaredLimits {
    pub(crate) kind: String,
    pub(crate) max_running: Option<u32>,
    pub(crate) rate_jobs: Option<u32>,
    pub(crate) rate_window_secs: Option<f64>,
    /// Absent from the rows of workers older than per-key limits.
    #[serde(default)]
    pub(crate) max_running_per_key: Option<u32>,
    #[serde(default)]
    pub(crate) rate_per_key_jobs: Option<u32>,
    #[serde(default)]
    pub(crate) rate_per_key_window_secs: Option<f64>,
}

/// What a worker says of itself.
#[derive(Debug, Clone)]
pub(crate) struct Presence {
    pub(crate) id: Uuid,
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) version: &'static str,
    pub(crate) queues: Vec<QueueSlots>,
    pub(crate) kinds: Vec<String>,
    pub(crate) limits: Vec<DeclaredLimits>,
}

/// A live worker, as [`LIVE_WORKERS`] returns it.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct WorkerRow {
    pub(crate) id: Uuid,
    pub(crate) host: String,
    pub(crate) pid: i64,
    pub(crate) version: String,
    pub(crate) queues: Json<Vec<QueueSlots>>,
    pub(crate) kinds: Vec<String>,
    pub(crate) started_at: DateTime<Utc>,
    pub(crate) last_seen_at: DateTime<Utc>,
    /// Each entry a [`DeclaredLimits`], unless written by a version that declares them otherwise.
    pub(crate) limits: Json<Vec<serde_json::Value>>,
    pub(crate) seen_secs_ago: f64,
}

/// Records `presence` as live now, gone after `gone_after` without another record:
/// [`RECORD_PRESENCE`]. `started_at` is the start returned by its first record (`None` before).
pub(crate) async fn record_presence(
    pool: &PgPool,
    presence: &Presence,
    started_at: Option<DateTime<Utc>>,
    gone_after: Duration,
) -> Result<DateTime<Utc>, sqlx::Error> {
    sqlx::query_scalar(RECORD_PRESENCE)
        .bind(presence.id)
        .bind(&presence.host)
        .bind(i64::from(presence.pid))
        .bind(presence.version)
        .bind(Json(&presence.queues))
        .bind(&presence.kinds)
        .bind(started_at)
        .bind(gone_after.as_secs_f64())
        .bind(Json(&presence.limits))
        .fetch_one(pool)
        .await
}

/// Deletes worker `id`'s row: [`FORGET_WORKER`].
pub(crate) async fn forget_worker(pool: &PgPool, id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query(FORGET_WORKER).bind(id).execute(pool).await?;
    Ok(())
}

/// Every live worker: [`LIVE_WORKERS`].
pub(crate) async fn live_workers(pool: &PgPool) -> Result<Vec<WorkerRow>, sqlx::Error> {
    sqlx::query_as(LIVE_WORKERS).fetch_all(pool).await
}
