//! Throughput over time: [`throughput`].
//!
//! Every worker counts the runs that end (done, retried, dead, cancelled) per queue and kind in
//! memory, and adds them to its own rows of the database, one per minute, queue and kind, with
//! each presence refresh (every 5 s by default; [`WorkerConfig::throughput`] turns it off). So a
//! page that shows throughput reads a few hundred small rows, never the retained jobs, and
//! completions never wait for the bookkeeping. These are statistics, not the record of any job:
//!
//! - a run is counted in the minute (database clock) of the refresh that writes it, at most one
//!   presence interval after it ended;
//! - a worker killed or stopped at once loses what it had not written yet (at most one
//!   interval's counts);
//! - runs are counted as they end and their outcome is decided, like the `jobs_runs_total`
//!   metric: an outcome later dropped (its lease lost) was counted, and the job runs again;
//! - jobs whose lease expired count where the rescue puts them: retried (ready again) or dead.
//!
//! Retention deletes rows older than [`RetentionConfig::throughput_max_age`] (2 days).
//!
//! [`WorkerConfig::throughput`]: crate::WorkerConfig::throughput
//! [`RetentionConfig::throughput_max_age`]: super::RetentionConfig::throughput_max_age

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::AdminError;
use crate::store::throughput as store;

/// Longest window [`throughput`] reads.
pub const MAX_THROUGHPUT_WINDOW: Duration = Duration::from_secs(366 * 86_400);

/// The runs of one queue and kind that ended in one minute, summed over workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThroughputPoint {
    /// The minute's start (database clock).
    pub minute: DateTime<Utc>,
    /// The queue.
    pub queue: String,
    /// The job kind.
    pub kind: String,
    /// Runs that succeeded.
    pub done: u64,
    /// Runs that failed and will run again after their backoff (lease expiries included).
    pub retried: u64,
    /// Runs after which the job went dead (out of attempts, permanent, undecodable).
    pub dead: u64,
    /// Runs that cancelled their job.
    pub cancelled: u64,
}

/// The runs that ended in each minute that began within the last `window` (the current minute
/// included, still counting), per queue and kind, by minute, then queue, then kind. Minutes,
/// queues and kinds in which no run ended have no point.
///
/// Reads only the throughput rows of those minutes, through their primary key. Refused before
/// the database, with [`AdminError::InvalidWindow`], when `window` is zero or longer than
/// [`MAX_THROUGHPUT_WINDOW`].
pub async fn throughput(
    pool: &PgPool,
    window: Duration,
) -> Result<Vec<ThroughputPoint>, AdminError> {
    if window.is_zero() {
        return Err(AdminError::InvalidWindow("it is zero"));
    }
    if window > MAX_THROUGHPUT_WINDOW {
        return Err(AdminError::InvalidWindow("it is longer than 366 days"));
    }
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(store::throughput(pool, window)
        .await?
        .into_iter()
        .map(|row| ThroughputPoint {
            minute: row.minute,
            queue: row.queue,
            kind: row.kind,
            done: count(row.done),
            retried: count(row.retried),
            dead: count(row.dead),
            cancelled: count(row.cancelled),
        })
        .collect())
}
