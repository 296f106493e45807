//! Helpers shared by workloads: a fresh database per run, waiting for a drain, statistics.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use jobs::postgres::testing::TestDatabase;
use sqlx::PgPool;

use crate::kinds::NOOP_RUNS;

/// A fresh, migrated database and a pool to it.
pub struct Fresh {
    pub database: TestDatabase,
    pub pool: PgPool,
}

impl Fresh {
    /// Creates it, with `connections` in the pool.
    pub async fn new(connections: u32) -> Result<Self, Box<dyn std::error::Error>> {
        let database = TestDatabase::create().await?;
        let pool = database.pool(connections).await?;
        jobs::migrate(&pool).await?;
        Ok(Self { database, pool })
    }

    /// A pool of `size` connections to the database, every one of them connected before it is
    /// returned, so that no measurement pays for connecting; close it after measuring, so that
    /// the next side (pgbench's clients among them) finds the server's connection slots free.
    pub async fn open_pool(&self, size: u32) -> Result<PgPool, sqlx::Error> {
        let pool = self.database.pool(size).await?;
        let mut connections = Vec::new();
        for _ in 0..size {
            connections.push(pool.acquire().await?);
        }
        drop(connections);
        Ok(pool)
    }

    /// `VACUUM ANALYZE` the job table, before measuring.
    pub async fn vacuum(&self) -> Result<(), sqlx::Error> {
        sqlx::query("VACUUM ANALYZE jobs_queue")
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

/// Inserts `count` ready `noop` jobs with plain SQL, outside any measurement.
pub async fn insert_ready_noops(pool: &PgPool, count: usize) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts)
         SELECT 'noop', 'default', jsonb_build_object('n', n), 8 FROM generate_series(1, $1) AS n",
    )
    .bind(i64::try_from(count).unwrap_or(i64::MAX))
    .execute(pool)
    .await?;
    Ok(())
}

/// Which no-ops a drain drains.
#[derive(Debug, Clone, Copy)]
pub enum Backlog {
    /// `noop` jobs.
    Noops,
    /// `fair_noop` jobs of this many tenants, taking turns.
    Fair(u32),
    /// `keyed_noop` jobs of this many merchants, taking turns.
    Keyed(u32),
}

/// Inserts `count` ready jobs of `backlog` with plain SQL, outside any measurement.
pub async fn insert_backlog(
    pool: &PgPool,
    count: usize,
    backlog: Backlog,
) -> Result<(), sqlx::Error> {
    let (kind, column, keys) = match backlog {
        Backlog::Noops => return insert_ready_noops(pool, count).await,
        Backlog::Fair(tenants) => ("fair_noop", "fair_key", tenants),
        Backlog::Keyed(merchants) => ("keyed_noop", "limit_key", merchants),
    };
    let field = if column == "fair_key" {
        "tenant"
    } else {
        "merchant"
    };
    sqlx::query(&format!(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, {column})
         SELECT '{kind}', 'default', jsonb_build_object('{field}', n % $2, 'n', n), 8,
                (n % $2)::text
         FROM generate_series(1, $1) AS n"
    ))
    .bind(i64::try_from(count).unwrap_or(i64::MAX))
    .bind(i64::from(keys))
    .execute(pool)
    .await?;
    Ok(())
}

/// Inserts `count` done `noop` jobs with plain SQL, as retention would keep them, outside any
/// measurement.
pub async fn insert_done_noops(pool: &PgPool, count: usize) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, finished_at)
         SELECT 'noop', 'default', jsonb_build_object('n', n), 'done', 1, 8, now()
         FROM generate_series(1, $1) AS n",
    )
    .bind(i64::try_from(count).unwrap_or(i64::MAX))
    .execute(pool)
    .await?;
    Ok(())
}

/// Empties `tables` (the job table among them), fills the job table with `jobs` ready no-ops,
/// vacuums, then times how long the worker `start` starts takes to drain them (it is shut down
/// after); returns the jobs drained per second.
pub async fn timed_noop_drain(
    fresh: &Fresh,
    tables: &str,
    jobs: usize,
    start: impl FnOnce() -> Result<jobs::WorkerHandle, jobs::WorkerError>,
) -> Result<f64, Box<dyn std::error::Error>> {
    timed_drain(fresh, tables, jobs, Backlog::Noops, start).await
}

/// [`timed_noop_drain`], of the jobs of `backlog`.
pub async fn timed_drain(
    fresh: &Fresh,
    tables: &str,
    jobs: usize,
    backlog: Backlog,
    start: impl FnOnce() -> Result<jobs::WorkerHandle, jobs::WorkerError>,
) -> Result<f64, Box<dyn std::error::Error>> {
    sqlx::query(&format!("TRUNCATE {tables}"))
        .execute(&fresh.pool)
        .await?;
    insert_backlog(&fresh.pool, jobs, backlog).await?;
    fresh.vacuum().await?;
    let runs = NOOP_RUNS.load(Ordering::Relaxed) + jobs as u64;
    let started = Instant::now();
    let worker = start()?;
    let drained = wait_until_drained(&fresh.pool, runs, Duration::from_secs(600)).await?;
    worker.shutdown().await?;
    Ok(jobs as f64 / (drained - started).as_secs_f64())
}

/// Waits until `noop` has run `runs` times in this process (watching a counter, so the
/// database being measured does no extra work), then until no job is ready or running (the
/// last outcomes written); returns when it saw that.
pub async fn wait_until_drained(
    pool: &PgPool,
    runs: u64,
    deadline: Duration,
) -> Result<Instant, String> {
    let give_up = Instant::now() + deadline;
    let past_deadline = || format!("not drained within {deadline:?}");
    while NOOP_RUNS.load(Ordering::Relaxed) < runs {
        if Instant::now() > give_up {
            return Err(past_deadline());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    loop {
        // One probe per partial index, each stopping at its first entry.
        let pending: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT FROM jobs_queue WHERE state = 'ready')
                 OR EXISTS (SELECT FROM jobs_queue WHERE state = 'running')",
        )
        .fetch_one(pool)
        .await
        .map_err(|error| error.to_string())?;
        if !pending {
            return Ok(Instant::now());
        }
        if Instant::now() > give_up {
            return Err(past_deadline());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Median, min and max of a non-empty list.
pub fn spread(values: &[f64]) -> (f64, f64, f64) {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    (median, sorted[0], sorted[sorted.len() - 1])
}

/// The value at quantile `q` (0 to 1) of a non-empty list.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let position = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[position]
}
