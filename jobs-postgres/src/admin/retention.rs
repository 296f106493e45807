//! Retention: deleting done and cancelled jobs past an age, published outbox rows past the same
//! age, expired processed keys and throughput rows past their own age, a batch at a time, one
//! process at a time. Dead jobs and parked outbox rows are never deleted here.
//!
//! Workflows are kept until they have ended: a finished job stays while a dependent of it has
//! not ended (the dependent may read its output), and a batch member while its batch, or the
//! batch's callback, has not ended. A job's dependency rows go with it; a batch's rows go once
//! it has ended, its callback is gone and no member remains.
//!
//! Every worker runs it periodically (see [`WorkerConfig::retention`]); tools and tests call
//! [`Retention::run_once`] directly.
//!
//! [`WorkerConfig::retention`]: crate::WorkerConfig::retention

use std::time::Duration;

use sqlx::PgPool;

use super::AdminError;
use crate::config_error::ConfigError;
use crate::store::retention as store;
use crate::store::throughput;

/// What retention keeps and how it deletes the rest. Every field has a documented default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionConfig {
    /// How long done and cancelled jobs are kept after they finished, and outbox rows after they
    /// were published. Default 7 days. The `retained` dedupe keys of jobs are held as long:
    /// deleting a job frees its key.
    pub max_age: Duration,
    /// Most jobs one statement deletes, so that no statement holds locks or writes WAL for long.
    /// Default 1,000.
    pub batch_size: usize,
    /// How often a worker looks for jobs to delete when the last run found fewer than a full
    /// batch. Default 1 minute. While full batches come back, it goes on at once.
    pub interval: Duration,
    /// How long the throughput's rows ([`admin::throughput`](super::throughput)), one per
    /// minute, queue, kind and worker, are kept. Default 2 days.
    pub throughput_max_age: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            max_age: Duration::from_secs(7 * 86_400),
            batch_size: 1_000,
            interval: Duration::from_secs(60),
            throughput_max_age: Duration::from_secs(2 * 86_400),
        }
    }
}

impl RetentionConfig {
    /// Checks that the settings can work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |setting, reason| Err(ConfigError { setting, reason });
        if self.batch_size == 0 {
            return fail("retention.batch_size", "must be at least 1");
        }
        if self.interval.is_zero() {
            return fail("retention.interval", "must be longer than zero");
        }
        Ok(())
    }
}

/// What one [`Retention::run_once`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Another process was pruning: this run deleted nothing and did not wait.
    pub locked_elsewhere: bool,
    /// Done jobs deleted.
    pub done: u64,
    /// Cancelled jobs deleted.
    pub cancelled: u64,
    /// Expired processed keys deleted (see [`crate::processed`]).
    pub processed_keys: u64,
    /// Published outbox rows deleted (see [`crate::outbox`]).
    pub outbox: u64,
    /// Throughput rows deleted (see [`admin::throughput`](super::throughput)); never counted by
    /// [`Retention::preview`].
    pub throughput: u64,
    /// Batches whose bookkeeping was deleted (see [`crate::batch`]): ended, callback gone, no
    /// member left; never counted by [`Retention::preview`].
    pub batches: u64,
    /// A full batch was deleted: more may be waiting, run again at once.
    pub more: bool,
}

impl RetentionReport {
    /// Jobs deleted, done and cancelled.
    pub fn deleted(&self) -> u64 {
        self.done + self.cancelled
    }
}

/// The retention service: see the [module](self) docs.
#[derive(Debug, Clone)]
pub struct Retention {
    pool: PgPool,
    config: RetentionConfig,
}

impl Retention {
    /// A retention service on `pool`; refuses settings that cannot work.
    pub fn new(pool: PgPool, config: RetentionConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self { pool, config })
    }

    /// Its settings.
    pub fn config(&self) -> &RetentionConfig {
        &self.config
    }

    /// What running [`run_once`](Self::run_once) until nothing is left would delete now,
    /// changing nothing: the done and cancelled jobs finished more than `max_age` ago that no
    /// workflow keeps, the
    /// expired processed keys and the outbox rows published more than `max_age` ago, counted.
    /// `locked_elsewhere` and `more` are always `false`.
    pub async fn preview(&self) -> Result<RetentionReport, AdminError> {
        let counts = store::count_prunable(&self.pool, self.config.max_age).await?;
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        Ok(RetentionReport {
            done: count(counts.done),
            cancelled: count(counts.cancelled),
            processed_keys: count(counts.processed_keys),
            outbox: count(counts.outbox),
            ..RetentionReport::default()
        })
    }

    /// Deletes one batch: up to `batch_size` done and cancelled jobs that finished more than
    /// `max_age` ago, oldest first, in one statement; then up to `batch_size` expired processed
    /// keys in another; then up to `batch_size` outbox rows published more than `max_age` ago in
    /// a third; then up to `batch_size` throughput rows older than `throughput_max_age` in a
    /// fourth; then up to `batch_size` batches that ended more than `max_age` ago and hold
    /// nothing any more in a fifth. Jobs a workflow still needs are kept (see the
    /// [module](self)).
    ///
    /// Each statement first tries the retention advisory lock (released when it commits): when
    /// another process holds it, nothing is deleted and the report says so, so only one process
    /// deletes at a time and none waits for another.
    pub async fn run_once(&self) -> Result<RetentionReport, AdminError> {
        let limit = i64::try_from(self.config.batch_size).unwrap_or(i64::MAX);
        let max_age = self.config.max_age;
        let jobs = store::prune_finished(&self.pool, max_age, limit).await?;
        if !jobs.locked {
            return Ok(RetentionReport {
                locked_elsewhere: true,
                ..RetentionReport::default()
            });
        }
        let keys = store::prune_processed_keys(&self.pool, limit).await?;
        let outbox = store::prune_published_outbox(&self.pool, max_age, limit).await?;
        let throughput =
            throughput::prune_throughput(&self.pool, self.config.throughput_max_age, limit).await?;
        let batches = store::prune_batches(&self.pool, max_age, limit).await?;
        let report = RetentionReport {
            locked_elsewhere: !keys.locked
                || !outbox.locked
                || !throughput.locked
                || !batches.locked,
            done: u64::try_from(jobs.done).unwrap_or(0),
            cancelled: u64::try_from(jobs.cancelled).unwrap_or(0),
            processed_keys: u64::try_from(keys.deleted).unwrap_or(0),
            outbox: u64::try_from(outbox.deleted).unwrap_or(0),
            throughput: u64::try_from(throughput.deleted).unwrap_or(0),
            batches: u64::try_from(batches.deleted).unwrap_or(0),
            more: jobs.examined >= limit
                || keys.deleted >= limit
                || outbox.deleted >= limit
                || throughput.deleted >= limit
                || batches.deleted >= limit,
        };
        if report.deleted() > 0 || report.processed_keys > 0 || report.outbox > 0 {
            tracing::debug!(
                done = report.done,
                cancelled = report.cancelled,
                processed_keys = report.processed_keys,
                outbox = report.outbox,
                "retention deleted finished jobs, expired keys and published outbox rows"
            );
        }
        Ok(report)
    }
}
