//! The live workers: [`live_workers`].
//!
//! Every worker process records itself in the database when it starts (host, process id, crate
//! version, queues with their concurrency, kinds), refreshes the record every
//! [`WorkerConfig::presence_interval`] (5 s by default) whether or not it runs anything, and
//! deletes it when it stops gracefully. One not refreshed for [`PRESENCE_MISSED`] intervals is
//! gone (killed, crashed, cut off from the database) and no longer listed. [`check`](super::check)
//! uses them to report ready jobs that no live worker can claim.
//!
//! [`WorkerConfig::presence_interval`]: crate::WorkerConfig::presence_interval
//! [`PRESENCE_MISSED`]: crate::worker::PRESENCE_MISSED

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::{AdminError, KindLimits};
use crate::admin::stats::seconds;
use crate::store::workers as store;

/// A worker process seen recently enough to count as running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveWorker {
    /// Its id, drawn at random when it was built ([`Worker::id`](crate::Worker::id)).
    pub id: Uuid,
    /// The machine it runs on, as it names itself.
    pub host: String,
    /// Its process id on that machine.
    pub pid: u32,
    /// The version of the `jobs` crate it runs.
    pub version: String,
    /// The queues it claims from, with how many jobs of each it runs at once, by name.
    pub queues: Vec<WorkerQueue>,
    /// The job kinds it runs, by name.
    pub kinds: Vec<String>,
    /// When it started (database clock).
    pub started_at: DateTime<Utc>,
    /// When it last said it was running (database clock).
    pub last_seen_at: DateTime<Utc>,
    /// How long ago that was.
    pub last_seen_ago: Duration,
    /// The limits it enforces, by kind (only the kinds it limits).
    pub limits: Vec<KindLimits>,
}

/// One queue of a [`LiveWorker`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerQueue {
    /// The queue.
    pub queue: String,
    /// Jobs of it the worker runs at once.
    pub concurrency: u64,
}

impl LiveWorker {
    /// Whether it claims from `queue`.
    pub fn serves_queue(&self, queue: &str) -> bool {
        self.queues.iter().any(|served| served.queue == queue)
    }

    /// Whether it claims jobs of `kind` from `queue`: it runs the kind and claims from the queue.
    pub fn serves(&self, queue: &str, kind: &str) -> bool {
        self.serves_queue(queue) && self.kinds.iter().any(|run| run == kind)
    }
}

/// Every live worker, by host, then start.
pub async fn live_workers(pool: &PgPool) -> Result<Vec<LiveWorker>, AdminError> {
    let rows = store::live_workers(pool).await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let mut queues: Vec<WorkerQueue> = row
                .queues
                .0
                .into_iter()
                .map(|slots| WorkerQueue {
                    queue: slots.queue,
                    concurrency: slots.concurrency,
                })
                .collect();
            queues.sort_by(|a, b| a.queue.cmp(&b.queue));
            let mut kinds = row.kinds;
            kinds.sort();
            LiveWorker {
                id: row.id,
                host: row.host,
                pid: u32::try_from(row.pid).unwrap_or(0),
                version: row.version,
                queues,
                kinds,
                started_at: row.started_at,
                last_seen_at: row.last_seen_at,
                last_seen_ago: seconds(row.seen_secs_ago).unwrap_or_default(),
                // An entry this version cannot read (another version's) is left out.
                limits: row
                    .limits
                    .0
                    .into_iter()
                    .filter_map(|entry| serde_json::from_value(entry).ok())
                    .map(KindLimits::from_declared)
                    .collect(),
            }
        })
        .collect())
}
