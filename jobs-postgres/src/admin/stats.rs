//! The health numbers of every queue and kind, from one statement: see [`stats`].

use std::time::Duration;

use chrono::{DateTime, Utc};
use jobs_core::{Schedule, ScheduleError};

use sqlx::PgPool;

use super::limits::add_limit_stats;
use super::workflow::{longest_open_batches, longest_waiting, OpenBatch, WaitingJob};
use super::{live_workers, paused_queues, AdminError, LimitStats, LiveWorker, QueuePause};
pub use crate::store::stats::EXACT_RETAINED_BOUND;
use crate::store::stats::{self as store, RetainedRow, StatsRow};

/// The jobs of one queue and kind (or of several, summed), by state.
///
/// Waiting, ready, scheduled, running and dead are exact. Done and cancelled are exact too while there are
/// at most [`EXACT_RETAINED_BOUND`] of them, estimates beyond: counting millions of retained rows
/// on every poll is what this avoids. [`Stats::retained`] says which.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    /// Jobs waiting for other jobs to end: their prerequisites (see
    /// [`EnqueueBuilder::after`](crate::EnqueueBuilder::after)), or the members of the batch
    /// whose callback they are. Not claimable until then.
    pub waiting: u64,
    /// Ready jobs that are due (`run_at` has come): waiting for a free slot.
    pub ready: u64,
    /// Ready jobs whose `run_at` is still ahead: retries backing off, delayed and snoozed jobs.
    pub scheduled: u64,
    /// Jobs a worker holds.
    pub running: u64,
    /// Running jobs whose lease has expired: their worker stopped renewing it (crashed, paused,
    /// cut off), and no rescue has brought them back yet. Rescue sweeps every 5 s by default, so
    /// a few for a few seconds are normal; many, or for long, mean no worker is rescuing.
    pub expired_leases: u64,
    /// Dead jobs: out of attempts, failed permanently, or undecodable. Kept until an operator
    /// replays or discards them.
    pub dead: u64,
    /// Done jobs still retained (exact or estimated: see [`Stats::retained`]).
    pub done: u64,
    /// Cancelled jobs still retained (exact or estimated: see [`Stats::retained`]).
    pub cancelled: u64,
    /// How long the oldest due ready job has waited since its `run_at`; `None` when none is due.
    pub oldest_ready_age: Option<Duration>,
    /// How long ago the longest-expired lease expired; `None` when no lease has expired.
    pub longest_expired_lease: Option<Duration>,
}

impl Counts {
    /// Adds `other` to these counts (the ages keep the longer of the two).
    pub fn add(&mut self, other: &Counts) {
        self.waiting += other.waiting;
        self.ready += other.ready;
        self.scheduled += other.scheduled;
        self.running += other.running;
        self.expired_leases += other.expired_leases;
        self.dead += other.dead;
        self.done += other.done;
        self.cancelled += other.cancelled;
        self.oldest_ready_age = self.oldest_ready_age.max(other.oldest_ready_age);
        self.longest_expired_lease = self.longest_expired_lease.max(other.longest_expired_lease);
    }
}

/// The counts of one kind in one queue.
#[derive(Debug, Clone, PartialEq)]
pub struct KindStats {
    /// The queue.
    pub queue: String,
    /// The job kind.
    pub kind: String,
    /// Its jobs, by state.
    pub counts: Counts,
}

/// The health numbers of the whole table: see [`stats`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Every queue and kind with jobs, ordered by queue then kind.
    pub kinds: Vec<KindStats>,
    /// Where the done and cancelled counts come from: counted, estimated, or unknown.
    pub retained: RetainedCounts,
    /// How long ago the table's statistics (on which the estimates rest) were gathered, when
    /// known.
    pub analyzed_ago: Option<Duration>,
    /// Every schedule, by name.
    pub schedules: Vec<ScheduleStats>,
    /// The outbox: rows waiting for a relay, and parked ones.
    pub outbox: OutboxStats,
    /// The paused queues, by name (see [`pause_queue`](super::pause_queue)).
    pub paused: Vec<QueuePause>,
    /// The live workers, by host, then start (see [`live_workers`](super::live_workers)).
    pub workers: Vec<LiveWorker>,
    /// The jobs waiting longest for other jobs, oldest first, at most
    /// [`STUCK_LISTED`](super::STUCK_LISTED), each with the prerequisite it still waits for.
    pub longest_waiting: Vec<WaitingJob>,
    /// The batches open longest, oldest first, at most [`STUCK_LISTED`](super::STUCK_LISTED).
    pub longest_open_batches: Vec<OpenBatch>,
    /// Every kind a live worker limits (running jobs, rate), by name, with how much of each
    /// limit is in use and how many jobs wait on it.
    pub limits: Vec<LimitStats>,
}

/// Where the done and cancelled numbers of [`Stats`] come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RetainedCounts {
    /// Counted exactly: the table holds at most [`EXACT_RETAINED_BOUND`] done and cancelled
    /// jobs (a new table, or one that retention keeps small).
    Counted,
    /// Estimated from the planner's statistics (the `jobs_queue_state_mix` sample, gathered by
    /// `ANALYZE` and autovacuum, times the table's estimated row count): there are more than
    /// [`EXACT_RETAINED_BOUND`] of them.
    Estimated,
    /// Unknown: more than [`EXACT_RETAINED_BOUND`] of them, and no estimate, because the table
    /// has not been analyzed yet (autovacuum does it once enough rows changed; `ANALYZE
    /// jobs_queue` does it now) or this role may not read the statistics (PostgreSQL shows them
    /// to the table's owner only). Done and cancelled are 0 and mean nothing.
    #[default]
    Unknown,
}

/// The health numbers of the outbox (see [`crate::outbox`]), counted exactly.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OutboxStats {
    /// Rows not published yet: waiting for a relay, or backing off after a failed publish.
    pub unpublished: u64,
    /// How long ago the oldest unpublished row was written; `None` when every row is published
    /// or parked. It grows without bound when no relay runs, or when the broker is unreachable.
    pub oldest_unpublished_age: Option<Duration>,
    /// Parked rows: they failed permanently, or on every attempt, and are not published until
    /// an operator replays them.
    pub parked: u64,
}

/// Most ticks [`ScheduleStats::ticks_since_success`] counts.
pub const MAX_COUNTED_TICKS: usize = 1_000;

/// The bookkeeping of one schedule: when it last ticked and last succeeded.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleStats {
    /// The schedule's name.
    pub name: String,
    /// The kind it enqueues.
    pub kind: String,
    /// The queue its jobs go to.
    pub queue: String,
    /// When it ticks: `cron <expression> in <time zone>` or `every <duration>`.
    pub description: String,
    /// What happens to missed ticks: `latest`, `skip` or `all:<max>`.
    pub missed: String,
    /// When a worker first registered it.
    pub created_at: DateTime<Utc>,
    /// The latest tick dealt with (enqueued, or skipped as missed).
    pub last_tick_at: DateTime<Utc>,
    /// When one of its jobs last completed; `None` if none has since it was registered.
    pub last_success_at: Option<DateTime<Utc>>,
    /// The database's clock when these numbers were taken.
    pub checked_at: DateTime<Utc>,
}

impl ScheduleStats {
    /// The schedule, read back from its description.
    pub fn schedule(&self) -> Result<Schedule, ScheduleError> {
        Schedule::parse(&self.name, &self.kind, &self.description)
    }

    /// How many ticks came due after its last success (or, with none, after it was
    /// registered) and have had `grace` to succeed, counting at most [`MAX_COUNTED_TICKS`]. Two
    /// or more mean two periods went by without a success: runs failing, or not happening.
    pub fn ticks_since_success(&self, grace: Duration) -> Result<usize, ScheduleError> {
        let since = self.last_success_at.unwrap_or(self.created_at);
        Ok(self
            .schedule()?
            .ticks_since(since, self.checked_at, grace, MAX_COUNTED_TICKS))
    }

    /// How long ago one of its jobs last completed, when one has.
    pub fn last_success_ago(&self) -> Option<Duration> {
        self.last_success_at
            .and_then(|at| (self.checked_at - at).to_std().ok())
    }
}

impl Stats {
    /// All kinds of all queues, summed.
    pub fn total(&self) -> Counts {
        let mut total = Counts::default();
        for kind in &self.kinds {
            total.add(&kind.counts);
        }
        total
    }

    /// Each queue's kinds summed, ordered by queue.
    pub fn queues(&self) -> Vec<(String, Counts)> {
        let mut queues: Vec<(String, Counts)> = Vec::new();
        for kind in &self.kinds {
            match queues.last_mut() {
                Some((queue, counts)) if *queue == kind.queue => counts.add(&kind.counts),
                _ => queues.push((kind.queue.clone(), kind.counts.clone())),
            }
        }
        queues
    }
}

/// The health numbers of every queue and kind, of the schedules and of the outbox, in one
/// statement and one round trip; then the paused queues and the live workers, each from its
/// small table; then the jobs waiting longest (when any waits) and the batches open longest,
/// through their indexes.
///
/// Cheap enough to poll every few seconds on a table holding millions of retained jobs: the
/// live states are counted through their partial indexes, and done and cancelled are estimated
/// from the planner's statistics instead of counted. When there is no estimate, or it says there
/// are at most [`EXACT_RETAINED_BOUND`] of them, a second statement counts them exactly, reading
/// at most that many rows (see [`Stats::retained`]).
pub async fn stats(pool: &PgPool) -> Result<Stats, AdminError> {
    let mut stats = from_rows(store::queue_stats(pool).await?);
    let estimated = stats.total();
    let few = estimated.done + estimated.cancelled <= EXACT_RETAINED_BOUND.unsigned_abs();
    if stats.retained == RetainedCounts::Unknown || few {
        match store::retained_counts(pool).await? {
            (rows, true) => stats.count_retained(rows),
            // Too many to count and no estimate: at least list the kinds the count came across.
            (rows, false) if stats.retained == RetainedCounts::Unknown => {
                for row in &rows {
                    stats.kind_mut(&row.queue, &row.kind);
                }
            }
            (_, false) => {}
        }
    }
    stats.paused = paused_queues(pool).await?;
    stats.workers = live_workers(pool).await?;
    add_limit_stats(pool, &mut stats).await?;
    if stats.total().waiting > 0 {
        stats.longest_waiting = longest_waiting(pool).await?;
    }
    stats.longest_open_batches = longest_open_batches(pool).await?;
    Ok(stats)
}

impl Stats {
    /// Replaces the done and cancelled numbers with `rows`, counted exactly, adding the queues
    /// and kinds that hold only such jobs.
    fn count_retained(&mut self, rows: Vec<RetainedRow>) {
        for kind in &mut self.kinds {
            kind.counts.done = 0;
            kind.counts.cancelled = 0;
        }
        for row in rows {
            let counts = self.kind_mut(&row.queue, &row.kind);
            counts.done = count(Some(row.done));
            counts.cancelled = count(Some(row.cancelled));
        }
        self.retained = RetainedCounts::Counted;
    }

    /// The counts of `kind` in `queue`, added in order (all zero) when missing.
    fn kind_mut(&mut self, queue: &str, kind: &str) -> &mut Counts {
        let position = self.kinds.binary_search_by(|listed| {
            (listed.queue.as_str(), listed.kind.as_str()).cmp(&(queue, kind))
        });
        let at = match position {
            Ok(found) => found,
            Err(at) => {
                self.kinds.insert(
                    at,
                    KindStats {
                        queue: queue.to_owned(),
                        kind: kind.to_owned(),
                        counts: Counts::default(),
                    },
                );
                at
            }
        };
        &mut self.kinds[at].counts
    }
}

/// The health numbers that the rows of the stats statement hold.
pub(crate) fn from_rows(rows: Vec<StatsRow>) -> Stats {
    let mut stats = Stats::default();
    for (position, row) in rows.into_iter().enumerate() {
        stats.retained = if row.estimated {
            RetainedCounts::Estimated
        } else {
            RetainedCounts::Unknown
        };
        stats.analyzed_ago = row.analyzed_secs_ago.and_then(seconds);
        if position == 0 {
            stats.outbox = OutboxStats {
                unpublished: count(Some(row.outbox_unpublished)),
                oldest_unpublished_age: row.outbox_oldest_unpublished_secs.and_then(seconds),
                parked: count(Some(row.outbox_parked)),
            };
            let checked_at = instant(row.now_epoch);
            stats.schedules = row
                .schedules
                .0
                .into_iter()
                .map(|schedule| ScheduleStats {
                    name: schedule.name,
                    kind: schedule.kind,
                    queue: schedule.queue,
                    description: schedule.description,
                    missed: schedule.missed,
                    created_at: instant(schedule.created_at),
                    last_tick_at: instant(schedule.last_tick_at),
                    last_success_at: schedule.last_success_at.map(instant),
                    checked_at,
                })
                .collect();
        }
        let (Some(queue), Some(kind)) = (row.queue, row.kind) else {
            continue;
        };
        stats.kinds.push(KindStats {
            queue,
            kind,
            counts: Counts {
                waiting: count(row.waiting),
                ready: count(row.ready),
                scheduled: count(row.scheduled),
                running: count(row.running),
                expired_leases: count(row.expired_leases),
                dead: count(row.dead),
                done: count(row.done),
                cancelled: count(row.cancelled),
                oldest_ready_age: row.oldest_ready_secs.and_then(seconds),
                longest_expired_lease: row.longest_expired_lease_secs.and_then(seconds),
            },
        });
    }
    stats
}

fn count(value: Option<i64>) -> u64 {
    value
        .and_then(|value| u64::try_from(value).ok())
        .unwrap_or(0)
}

/// A point in time from seconds since the Unix epoch.
fn instant(epoch: f64) -> DateTime<Utc> {
    // Microseconds, as PostgreSQL keeps them; far outside any timestamp's range otherwise.
    #[allow(clippy::cast_possible_truncation)]
    let micros = (epoch * 1_000_000.0).round() as i64;
    DateTime::from_timestamp_micros(micros).unwrap_or_default()
}

/// A duration from seconds; clock skew between rows can make tiny ages negative: those are 0.
pub(crate) fn seconds(secs: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(secs.max(0.0)).ok()
}
