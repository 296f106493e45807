//! The limits live workers enforce, and how much of each is in use: see [`LimitStats`].

use std::collections::BTreeMap;
use std::time::Duration;

use jobs_core::RateLimit;
use sqlx::PgPool;

use super::{AdminError, LiveWorker, Stats};
use crate::store::stats as store;
use crate::store::workers::DeclaredLimits;

/// The limits a worker enforces on one kind (`#[job(max_running = .., rate_limit = ..,
/// max_running_per_key = ..)]`, or their run-time equivalents on the worker's builder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindLimits {
    /// The job kind.
    pub kind: String,
    /// Most jobs of it running at once across all workers, if limited.
    pub max_running: Option<u32>,
    /// Most jobs of it started in any window of the limit's length, if limited.
    pub rate_limit: Option<RateLimit>,
    /// Most jobs of it with the same limit key running at once, if limited.
    pub max_running_per_key: Option<u32>,
    /// Most jobs of it with the same limit key started in any window of the limit's length, if
    /// limited.
    pub rate_limit_per_key: Option<RateLimit>,
}

impl KindLimits {
    /// The limits a worker's row declares; a rate limit the row holds but this version cannot
    /// read is left out.
    pub(crate) fn from_declared(declared: DeclaredLimits) -> Self {
        let rate = |jobs: Option<u32>, secs: Option<f64>| match (jobs, secs) {
            (Some(jobs), Some(secs)) => Duration::try_from_secs_f64(secs)
                .ok()
                .and_then(|per| RateLimit::new(jobs, per).ok()),
            _ => None,
        };
        let rate_limit = rate(declared.rate_jobs, declared.rate_window_secs);
        let rate_limit_per_key = rate(
            declared.rate_per_key_jobs,
            declared.rate_per_key_window_secs,
        );
        Self {
            kind: declared.kind,
            max_running: declared.max_running,
            rate_limit,
            max_running_per_key: declared.max_running_per_key,
            rate_limit_per_key,
        }
    }

    /// Whether it limits anything.
    fn limits_anything(&self) -> bool {
        self.max_running.is_some()
            || self.rate_limit.is_some()
            || self.max_running_per_key.is_some()
            || self.rate_limit_per_key.is_some()
    }
}

/// The limits as a sentence: "at most 2 running, at most 100/1s started, at most 2 running per
/// key, at most 10/1s started per key" (those it has).
impl std::fmt::Display for KindLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let limits = [
            self.max_running.map(|max| format!("at most {max} running")),
            self.rate_limit
                .map(|rate| format!("at most {rate} started")),
            self.max_running_per_key
                .map(|max| format!("at most {max} running per key")),
            self.rate_limit_per_key
                .map(|rate| format!("at most {rate} started per key")),
        ];
        let limits: Vec<String> = limits.into_iter().flatten().collect();
        f.write_str(&limits.join(", "))
    }
}

/// One limited kind in [`Stats::limits`]: its limits, as the live workers running it declared
/// them, and how much of each is in use.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitStats {
    /// The limits, as the first live worker running the kind declared them.
    pub limits: KindLimits,
    /// Whether live workers running the kind declare different limits, or one runs it with no
    /// limit: each enforces its own, and one without a limit ignores the others' (a deploy under
    /// way, or configuration that differs).
    pub workers_disagree: bool,
    /// Jobs of the kind running now, in every queue.
    pub running: u64,
    /// Jobs of the kind started in the rate limit's current window, as the limit counts them
    /// (starts recorded per 1/64 of the window count from the slice's last one, so a few may
    /// be up to 1/64 of the window older); 0 without a rate limit.
    pub started_in_window: u64,
    /// Due ready jobs of the kind, in every queue that is not paused.
    pub due: u64,
    /// Limit keys whose running jobs fill
    /// [`max_running_per_key`](KindLimits::max_running_per_key), or whose starts fill
    /// [`rate_limit_per_key`](KindLimits::rate_limit_per_key)'s window; 0 without a per-key
    /// limit.
    pub keys_at_limit: u64,
    /// Due ready jobs that a limit holds back: all of [`due`](Self::due) while a limit of the
    /// kind is used up, else those of the keys at their limit.
    pub held_back: u64,
}

impl LimitStats {
    /// Whether the running limit is used up.
    pub fn running_limit_reached(&self) -> bool {
        self.limits
            .max_running
            .is_some_and(|max| self.running >= u64::from(max))
    }

    /// Whether the rate limit is used up for its current window.
    pub fn rate_limit_reached(&self) -> bool {
        self.limits
            .rate_limit
            .is_some_and(|limit| self.started_in_window >= u64::from(limit.jobs()))
    }
}

/// Fills [`Stats::limits`] from the live workers' declared limits and the counts of `stats`,
/// reading the starts in each rate limit's window (one statement, only when a live worker
/// declares a rate limit) and the use of each per-key limit (one statement per kind that has
/// one).
pub(crate) async fn add_limit_stats(pool: &PgPool, stats: &mut Stats) -> Result<(), AdminError> {
    let declared = declared_limits(&stats.workers);
    let (kinds, windows): (Vec<String>, Vec<f64>) = declared
        .values()
        .filter_map(|(limits, _)| {
            let limit = limits.rate_limit?;
            Some((limits.kind.clone(), limit.per().as_secs_f64()))
        })
        .unzip();
    let started: BTreeMap<String, i64> = if kinds.is_empty() {
        BTreeMap::new()
    } else {
        store::starts_in_window(pool, &kinds, &windows)
            .await?
            .into_iter()
            .collect()
    };
    let mut per_key = BTreeMap::new();
    for (limits, _) in declared.values() {
        if limits.max_running_per_key.is_some() || limits.rate_limit_per_key.is_some() {
            let queues: Vec<&str> = stats
                .kinds
                .iter()
                .filter(|counts| counts.kind == limits.kind)
                .filter(|counts| !stats.paused.iter().any(|pause| pause.queue == counts.queue))
                .map(|counts| counts.queue.as_str())
                .collect();
            per_key.insert(
                limits.kind.clone(),
                store::key_limit_use(
                    pool,
                    &limits.kind,
                    limits.max_running_per_key,
                    limits.rate_limit_per_key,
                    &queues,
                )
                .await?,
            );
        }
    }
    stats.limits = declared
        .into_values()
        .map(|(limits, workers_disagree)| {
            let (mut running, mut due) = (0, 0);
            for counts in stats.kinds.iter().filter(|kind| kind.kind == limits.kind) {
                running += counts.counts.running;
                let paused = stats.paused.iter().any(|pause| pause.queue == counts.queue);
                if !paused {
                    due += counts.counts.ready;
                }
            }
            let started_in_window = started
                .get(&limits.kind)
                .map_or(0, |started| u64::try_from(*started).unwrap_or(0));
            let mut stats = LimitStats {
                limits,
                workers_disagree,
                running,
                started_in_window,
                due,
                keys_at_limit: 0,
                held_back: 0,
            };
            if let Some(&(keys_at_limit, held_back)) = per_key.get(&stats.limits.kind) {
                stats.keys_at_limit = u64::try_from(keys_at_limit).unwrap_or(0);
                stats.held_back = u64::try_from(held_back).unwrap_or(0);
            }
            if stats.running_limit_reached() || stats.rate_limit_reached() {
                stats.held_back = due;
            }
            stats
        })
        .collect();
    Ok(())
}

/// The limits `workers` declare, by kind: the first worker's, and whether another declares
/// different ones or runs the kind with no limit at all (it claims the kind with its other kinds,
/// ignoring the limit: a deploy that adds a limit, half done).
fn declared_limits(workers: &[LiveWorker]) -> BTreeMap<String, (KindLimits, bool)> {
    let mut declared: BTreeMap<String, (KindLimits, bool)> = BTreeMap::new();
    for worker in workers {
        for limits in worker
            .limits
            .iter()
            .filter(|limits| limits.limits_anything())
        {
            match declared.get_mut(&limits.kind) {
                Some((first, disagree)) => *disagree |= first != limits,
                None => {
                    declared.insert(limits.kind.clone(), (limits.clone(), false));
                }
            }
        }
    }
    for worker in workers {
        for kind in &worker.kinds {
            let unlimited_here = !worker.limits.iter().any(|limits| &limits.kind == kind);
            if let (Some((_, disagree)), true) = (declared.get_mut(kind), unlimited_here) {
                *disagree = true;
            }
        }
    }
    declared
}
