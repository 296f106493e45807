//! The health numbers as gauges: see [`Gauges`].

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use ::metrics::{gauge, Label};
use sqlx::PgPool;

use super::{
    labels, DEAD, EXPIRED_LEASES, LIMIT_HELD_BACK, LIVE_WORKERS, LONGEST_EXPIRED_LEASE_SECONDS,
    OLDEST_READY_AGE_SECONDS, QUEUE_PAUSED_SECONDS, READY, RUNNING, SCHEDULED, WAITING,
};
use crate::admin::{self, AdminError, Counts, Stats};
use crate::store::stats as store;

/// Publishes the health numbers of [`admin::stats`] as gauges, one series per queue and kind.
///
/// Every worker runs one every [`WorkerConfig::gauges_interval`], with
/// [`refresh_shared`](Self::refresh_shared): one process per interval counts, the others publish
/// what it counted. Use one yourself in a process that runs no worker. It remembers what it
/// published: a queue and kind that no longer has live jobs is set to 0 rather than left at its
/// last value. Keep to one publisher per process (the gauges are the process's): another one
/// does not know what this one published, and would leave those series at their last values.
///
/// [`WorkerConfig::gauges_interval`]: crate::WorkerConfig::gauges_interval
#[derive(Debug, Default)]
pub struct Gauges {
    published: HashSet<(String, String)>,
    paused: HashSet<String>,
    /// The queues whose live workers were published.
    served: HashSet<String>,
    /// The limited kinds whose held-back jobs were published.
    limited: HashSet<String>,
}

impl Gauges {
    /// A publisher that has published nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the health numbers (one statement, see [`admin::stats`]) and publishes them.
    pub async fn refresh(&mut self, pool: &PgPool) -> Result<Stats, AdminError> {
        let stats = admin::stats(pool).await?;
        self.publish(&stats);
        Ok(stats)
    }

    /// Publishes the health numbers, counting them only when no process has in the last
    /// `interval`: one statement (and reads of the few paused queues, the live workers and, for
    /// the kinds they limit, the starts in their rate windows), which either counts (as
    /// [`refresh`](Self::refresh) does) and stores the figures for the other processes, or reads
    /// the figures the last count stored, without waiting for a count under way. Every process
    /// sharing the database thus publishes the same figures, taken at most about one `interval`
    /// before (two, counting its own period), while the backlog is counted once per `interval`
    /// instead of once per process. Before the first count has been stored, nothing is
    /// published.
    pub async fn refresh_shared(
        &mut self,
        pool: &PgPool,
        interval: Duration,
    ) -> Result<GaugesPass, AdminError> {
        let (rows, counted) = store::shared_queue_stats(pool, interval).await?;
        let mut stats = admin::stats_from_rows(rows);
        stats.paused = admin::paused_queues(pool).await?;
        stats.workers = admin::live_workers(pool).await?;
        admin::add_limit_stats(pool, &mut stats).await?;
        self.publish(&stats);
        Ok(GaugesPass { stats, counted })
    }

    /// Publishes `stats`, and 0 for every queue and kind published before that `stats` no longer
    /// holds.
    pub fn publish(&mut self, stats: &Stats) {
        let mut published = HashSet::with_capacity(stats.kinds.len());
        for kind in &stats.kinds {
            set(&kind.queue, &kind.kind, &kind.counts);
            published.insert((kind.queue.clone(), kind.kind.clone()));
        }
        for (queue, kind) in self.published.difference(&published) {
            set(queue, kind, &Counts::default());
        }
        self.published = published;
        let mut paused = HashSet::with_capacity(stats.paused.len());
        for pause in &stats.paused {
            set_paused(&pause.queue, pause.paused_for);
            paused.insert(pause.queue.clone());
        }
        for queue in self.paused.difference(&paused) {
            set_paused(queue, Duration::ZERO);
        }
        self.paused = paused;
        let mut workers: BTreeMap<&str, usize> = stats
            .kinds
            .iter()
            .map(|kind| (kind.queue.as_str(), 0))
            .collect();
        for worker in &stats.workers {
            for queue in &worker.queues {
                *workers.entry(queue.queue.as_str()).or_default() += 1;
            }
        }
        let mut served = HashSet::with_capacity(workers.len());
        for (queue, live) in workers {
            set_live_workers(queue, live);
            served.insert(queue.to_owned());
        }
        for queue in self.served.difference(&served) {
            set_live_workers(queue, 0);
        }
        self.served = served;
        let mut limited = HashSet::with_capacity(stats.limits.len());
        for limit in &stats.limits {
            set_held_back(&limit.limits.kind, limit.held_back);
            limited.insert(limit.limits.kind.clone());
        }
        for kind in self.limited.difference(&limited) {
            set_held_back(kind, 0);
        }
        self.limited = limited;
    }
}

/// What one [`Gauges::refresh_shared`] published.
#[derive(Debug, Clone, PartialEq)]
pub struct GaugesPass {
    /// The figures published.
    pub stats: Stats,
    /// Whether this pass counted them; otherwise another process did, within the interval.
    pub counted: bool,
}

/// Sets every gauge of one queue and kind.
fn set(queue: &str, kind: &str, counts: &Counts) {
    let labels = [
        Label::new(labels::KIND, kind.to_owned()),
        Label::new(labels::QUEUE, queue.to_owned()),
    ];
    let seconds = |age: Option<Duration>| age.map_or(0.0, |age| age.as_secs_f64());
    gauge!(WAITING, labels.iter()).set(counts.waiting as f64);
    gauge!(READY, labels.iter()).set(counts.ready as f64);
    gauge!(SCHEDULED, labels.iter()).set(counts.scheduled as f64);
    gauge!(RUNNING, labels.iter()).set(counts.running as f64);
    gauge!(EXPIRED_LEASES, labels.iter()).set(counts.expired_leases as f64);
    gauge!(DEAD, labels.iter()).set(counts.dead as f64);
    gauge!(OLDEST_READY_AGE_SECONDS, labels.iter()).set(seconds(counts.oldest_ready_age));
    gauge!(LONGEST_EXPIRED_LEASE_SECONDS, labels.iter()).set(seconds(counts.longest_expired_lease));
}

/// Sets how many live workers claim from `queue`.
fn set_live_workers(queue: &str, live: usize) {
    let labels = [Label::new(labels::QUEUE, queue.to_owned())];
    gauge!(LIVE_WORKERS, labels.iter()).set(live as f64);
}

/// Sets how many due jobs of `kind` its limit holds back.
fn set_held_back(kind: &str, held_back: u64) {
    let labels = [Label::new(labels::KIND, kind.to_owned())];
    gauge!(LIMIT_HELD_BACK, labels.iter()).set(held_back as f64);
}

/// Sets how long `queue` has been paused (0: it is not).
fn set_paused(queue: &str, paused_for: Duration) {
    let labels = [Label::new(labels::QUEUE, queue.to_owned())];
    gauge!(QUEUE_PAUSED_SECONDS, labels.iter()).set(paused_for.as_secs_f64());
}
