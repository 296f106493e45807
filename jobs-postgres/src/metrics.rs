//! Metrics through the [`metrics`](https://docs.rs/metrics) facade: every name the worker
//! records, with its labels and meaning, in one place.
//!
//! Install a recorder (for Prometheus, `metrics-exporter-prometheus`) before starting workers,
//! and call [`describe`] once it is installed to give each metric its unit and help text (every
//! worker also calls it when it starts). Without a recorder every call is a no-op.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | [`RUNS_TOTAL`] | counter | `kind`, `queue`, `outcome` | runs ended, by [`OutcomeLabel`] |
//! | [`RUN_SECONDS`] | histogram | `kind`, `queue` | how long runs took |
//! | [`PICKUP_LATENCY_SECONDS`] | histogram | `kind`, `queue` | how long due jobs waited for a claim |
//! | [`OUTCOMES_DROPPED_TOTAL`] | counter | `reason` | outcomes not written, by [`DropReason`] |
//! | [`RESCUED_TOTAL`] | counter | `kind`, `queue`, `state` | expired leases rescued |
//! | [`RESCUES_REFUSED_TOTAL`] | counter | `kind`, `queue` | expired leases the database refused to rescue |
//! | [`OUTBOX_DUPLICATE_IDS_TOTAL`] | counter | | outbox rows parked: the broker held another message under their id |
//! | [`WAITING`] | gauge | `kind`, `queue` | jobs waiting for other jobs (prerequisites, a batch) |
//! | [`READY`] | gauge | `kind`, `queue` | due jobs waiting for a slot |
//! | [`SCHEDULED`] | gauge | `kind`, `queue` | ready jobs whose `run_at` is ahead |
//! | [`RUNNING`] | gauge | `kind`, `queue` | jobs a worker holds |
//! | [`EXPIRED_LEASES`] | gauge | `kind`, `queue` | running jobs whose lease expired, not rescued yet |
//! | [`DEAD`] | gauge | `kind`, `queue` | dead jobs |
//! | [`OLDEST_READY_AGE_SECONDS`] | gauge | `kind`, `queue` | how long the oldest due job has waited |
//! | [`LONGEST_EXPIRED_LEASE_SECONDS`] | gauge | `kind`, `queue` | how long ago the longest-expired lease expired |
//! | [`QUEUE_PAUSED_SECONDS`] | gauge | `queue` | how long a paused queue has been paused |
//! | [`LIVE_WORKERS`] | gauge | `queue` | live worker processes that claim from the queue |
//! | [`LIMIT_HELD_BACK`] | gauge | `kind` | due jobs a used-up running or rate limit holds back |
//!
//! The counters and histograms are this process's own. The gauges are the table's health
//! numbers ([`admin::stats`](crate::admin::stats)), published by every worker every
//! [`WorkerConfig::gauges_interval`](crate::WorkerConfig::gauges_interval) (or by [`Gauges`]
//! from your own loop) and counted by one process per interval
//! ([`Gauges::refresh_shared`]): every process publishes the same numbers, so aggregate them
//! across processes with `max`, never `sum`.
//!
//! A worker keeps the handle of each series it records the first time it records it: install
//! the recorder before starting the worker.

mod gauges;
mod runs;
mod throughput;

pub use gauges::{Gauges, GaugesPass};
pub(crate) use runs::{outbox_duplicate_id, outcome_dropped, rescue_refused, WorkerMetrics};

use ::metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
use jobs_core::Decision;

/// Counter: runs that ended, labelled `kind`, `queue` and `outcome` (see [`OutcomeLabel`]).
/// Counted when the run ends and its outcome is decided, before it is written.
pub const RUNS_TOTAL: &str = "jobs_runs_total";

/// Histogram, seconds: how long runs took, from the start of the run (decoding the payload) to
/// its end, whatever the outcome, labelled `kind` and `queue`.
pub const RUN_SECONDS: &str = "jobs_run_seconds";

/// Histogram, seconds: how long each claimed job had been due (since its `run_at`, by the
/// database's clock) when a worker claimed it, labelled `kind` and `queue`. A retry counts from
/// the end of its backoff; a job rescued after its lease expired, from its original `run_at`.
pub const PICKUP_LATENCY_SECONDS: &str = "jobs_pickup_latency_seconds";

/// Counter: outcomes decided but not written, labelled `reason` (see [`DropReason`]). Each such
/// job runs again once its lease has expired and a rescue has brought it back.
pub const OUTCOMES_DROPPED_TOTAL: &str = "jobs_outcomes_dropped_total";

/// Counter: running jobs whose lease had expired, brought back by this process's rescue,
/// labelled `kind`, `queue` and `state` (`ready` to run again, or `dead` when out of attempts).
/// Each means a worker stopped renewing a lease: it crashed, paused or lost the database.
pub const RESCUED_TOTAL: &str = "jobs_rescued_total";

/// Counter: expired leases the database refused to rescue (a constraint or trigger refused the
/// row's new state), labelled `kind` and `queue`. Each such job is set aside by this process's
/// rescue for a while, stays `running` and is logged as an error; the other jobs are rescued.
pub const RESCUES_REFUSED_TOTAL: &str = "jobs_rescues_refused_total";

/// Counter: outbox rows this process's relay parked because the broker already held a
/// different message under the row's message id (see
/// [`PublishError::duplicate_id`](crate::outbox::PublishError::duplicate_id)). Any increase is
/// an alarm: something else publishes under the outbox's message ids.
pub const OUTBOX_DUPLICATE_IDS_TOTAL: &str = "jobs_outbox_duplicate_ids_total";

/// Gauge: jobs waiting for other jobs to end (their prerequisites, or the members of the batch
/// whose callback they are), labelled `kind` and `queue`.
pub const WAITING: &str = "jobs_waiting";

/// Gauge: ready jobs that are due, waiting for a free slot, labelled `kind` and `queue`.
pub const READY: &str = "jobs_ready";

/// Gauge: ready jobs whose `run_at` is ahead (retries backing off, delayed and snoozed jobs),
/// labelled `kind` and `queue`.
pub const SCHEDULED: &str = "jobs_scheduled";

/// Gauge: jobs a worker holds, labelled `kind` and `queue`.
pub const RUNNING: &str = "jobs_running";

/// Gauge: running jobs whose lease has expired and that no rescue has brought back yet,
/// labelled `kind` and `queue`.
pub const EXPIRED_LEASES: &str = "jobs_expired_leases";

/// Gauge: dead jobs (failed for good, kept until replayed or discarded), labelled `kind` and
/// `queue`.
pub const DEAD: &str = "jobs_dead";

/// Gauge, seconds: how long the oldest due ready job has waited since its `run_at` (0 when
/// none is due), labelled `kind` and `queue`.
pub const OLDEST_READY_AGE_SECONDS: &str = "jobs_oldest_ready_age_seconds";

/// Gauge, seconds: how long ago the longest-expired lease expired (0 when none has), labelled
/// `kind` and `queue`.
pub const LONGEST_EXPIRED_LEASE_SECONDS: &str = "jobs_longest_expired_lease_seconds";

/// Gauge, seconds: how long the queue has been paused (0 once resumed), labelled `queue`; a
/// series exists only for queues paused since the process started. Alert on it as `jobs check`
/// does on `queue_paused`.
pub const QUEUE_PAUSED_SECONDS: &str = "jobs_queue_paused_seconds";

/// Gauge: the live worker processes that claim from the queue (see
/// [`admin::live_workers`](crate::admin::live_workers)), labelled `queue`; published for every
/// queue a live worker serves or that holds jobs, so a queue with jobs and no worker shows 0.
/// Alert on 0 while `jobs_ready` is above 0, as `jobs check` does on `queue_unserved`.
pub const LIVE_WORKERS: &str = "jobs_live_workers";

/// Gauge: due ready jobs of a limited kind that its limit holds back (all its due jobs in
/// queues that are not paused while its running limit or its rate limit is used up, else 0),
/// labelled `kind`; published for every kind a live worker limits (see
/// [`LimitStats`](crate::admin::LimitStats)). The counts of running and due jobs are the shared
/// figures (up to one gauges interval old), the starts in the rate window are read at
/// publication. Alert when it stays above 0 for long: the limit is too low for the work.
pub const LIMIT_HELD_BACK: &str = "jobs_limit_held_back";

/// Every metric name, in the order of the table above.
pub const ALL: [&str; 18] = [
    RUNS_TOTAL,
    RUN_SECONDS,
    PICKUP_LATENCY_SECONDS,
    OUTCOMES_DROPPED_TOTAL,
    RESCUED_TOTAL,
    RESCUES_REFUSED_TOTAL,
    OUTBOX_DUPLICATE_IDS_TOTAL,
    WAITING,
    READY,
    SCHEDULED,
    RUNNING,
    EXPIRED_LEASES,
    DEAD,
    OLDEST_READY_AGE_SECONDS,
    LONGEST_EXPIRED_LEASE_SECONDS,
    QUEUE_PAUSED_SECONDS,
    LIVE_WORKERS,
    LIMIT_HELD_BACK,
];

/// The names of the labels.
pub mod labels {
    /// The job kind.
    pub const KIND: &str = "kind";
    /// The queue.
    pub const QUEUE: &str = "queue";
    /// How a run ended: an [`OutcomeLabel`](super::OutcomeLabel).
    pub const OUTCOME: &str = "outcome";
    /// Why an outcome was not written: a [`DropReason`](super::DropReason).
    pub const REASON: &str = "reason";
    /// The state a rescued job was given: `ready` or `dead`.
    pub const STATE: &str = "state";
}

/// How a run ended: the `outcome` label of [`RUNS_TOTAL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutcomeLabel {
    /// `done`: the job succeeded.
    Done,
    /// `retry`: the attempt failed and the job will run again after its backoff.
    Retry,
    /// `dead`: the job failed for good (permanently, out of attempts, or undecodable).
    Dead,
    /// `snoozed`: the job asked to run again later, the attempt not counted.
    Snoozed,
    /// `cancelled`: the job cancelled itself, or did not succeed after an operator asked to
    /// cancel it (and the worker had heard of the request).
    Cancelled,
    /// `interrupted`: the worker handed the job back as ready before the run ended, the attempt
    /// not counted: shutdown's grace period ran out.
    Interrupted,
    /// `abandoned`: the worker stopped at once; nothing was written, and the job comes back
    /// when its lease expires.
    Abandoned,
}

impl OutcomeLabel {
    /// Every outcome, in declaration order.
    pub const ALL: [OutcomeLabel; 7] = [
        OutcomeLabel::Done,
        OutcomeLabel::Retry,
        OutcomeLabel::Dead,
        OutcomeLabel::Snoozed,
        OutcomeLabel::Cancelled,
        OutcomeLabel::Interrupted,
        OutcomeLabel::Abandoned,
    ];

    /// The label's value.
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeLabel::Done => "done",
            OutcomeLabel::Retry => "retry",
            OutcomeLabel::Dead => "dead",
            OutcomeLabel::Snoozed => "snoozed",
            OutcomeLabel::Cancelled => "cancelled",
            OutcomeLabel::Interrupted => "interrupted",
            OutcomeLabel::Abandoned => "abandoned",
        }
    }

    /// The outcome of a run that ended with `decision`.
    pub fn of(decision: &Decision) -> Self {
        match decision {
            Decision::Complete { .. } => OutcomeLabel::Done,
            Decision::Retry { .. } => OutcomeLabel::Retry,
            Decision::Dead { .. } => OutcomeLabel::Dead,
            Decision::Snooze { .. } => OutcomeLabel::Snoozed,
            Decision::Cancel { .. } => OutcomeLabel::Cancelled,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Why a decided outcome was not written: the `reason` label of [`OUTCOMES_DROPPED_TOTAL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// `lease_lost`: another claim or a rescue had taken the job (its lease had expired).
    LeaseLost,
    /// `lease_ran_out`: the database could not be reached before the job's lease ran out.
    LeaseRanOut,
    /// `refused`: the database refused the outcome itself (bad data).
    Refused,
}

impl DropReason {
    /// The label's value.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::LeaseLost => "lease_lost",
            DropReason::LeaseRanOut => "lease_ran_out",
            DropReason::Refused => "refused",
        }
    }
}

/// Gives every metric its unit and help text in the installed recorder. Call it once the
/// recorder is installed; every worker calls it when it starts. Without a recorder it does
/// nothing.
pub fn describe() {
    describe_counter!(
        RUNS_TOTAL,
        Unit::Count,
        "Job runs that ended, by kind, queue and outcome (done, retry, dead, snoozed, cancelled, interrupted, abandoned)."
    );
    describe_histogram!(
        RUN_SECONDS,
        Unit::Seconds,
        "How long job runs took, by kind and queue."
    );
    describe_histogram!(
        PICKUP_LATENCY_SECONDS,
        Unit::Seconds,
        "How long claimed jobs had been due (since run_at) when a worker claimed them, by kind and queue."
    );
    describe_counter!(
        OUTCOMES_DROPPED_TOTAL,
        Unit::Count,
        "Run outcomes not written (lease_lost, lease_ran_out, refused); those jobs run again after their lease expires."
    );
    describe_counter!(
        RESCUED_TOTAL,
        Unit::Count,
        "Running jobs whose lease expired, brought back by this process's rescue, by kind, queue and new state."
    );
    describe_counter!(
        RESCUES_REFUSED_TOTAL,
        Unit::Count,
        "Expired leases the database refused to rescue, by kind and queue; each job is set aside for a while, stays running and is logged as an error."
    );
    describe_counter!(
        OUTBOX_DUPLICATE_IDS_TOTAL,
        Unit::Count,
        "Outbox rows parked because the broker already held a different message under their message id."
    );
    describe_gauge!(
        WAITING,
        Unit::Count,
        "Jobs waiting for other jobs to end (prerequisites, or a batch's members), by kind and queue."
    );
    describe_gauge!(
        READY,
        Unit::Count,
        "Due ready jobs waiting for a free slot, by kind and queue."
    );
    describe_gauge!(
        SCHEDULED,
        Unit::Count,
        "Ready jobs whose run_at is ahead (backing off, delayed, snoozed), by kind and queue."
    );
    describe_gauge!(
        RUNNING,
        Unit::Count,
        "Jobs a worker holds, by kind and queue."
    );
    describe_gauge!(
        EXPIRED_LEASES,
        Unit::Count,
        "Running jobs whose lease expired and that no rescue has brought back yet, by kind and queue."
    );
    describe_gauge!(
        DEAD,
        Unit::Count,
        "Dead jobs, kept until replayed or discarded, by kind and queue."
    );
    describe_gauge!(
        OLDEST_READY_AGE_SECONDS,
        Unit::Seconds,
        "How long the oldest due ready job has waited since its run_at, by kind and queue."
    );
    describe_gauge!(
        LONGEST_EXPIRED_LEASE_SECONDS,
        Unit::Seconds,
        "How long ago the longest-expired lease expired, by kind and queue."
    );
    describe_gauge!(
        QUEUE_PAUSED_SECONDS,
        Unit::Seconds,
        "How long the queue has been paused; 0 once resumed."
    );
    describe_gauge!(
        LIVE_WORKERS,
        Unit::Count,
        "Live worker processes that claim from the queue."
    );
    describe_gauge!(
        LIMIT_HELD_BACK,
        Unit::Count,
        "Due jobs of a limited kind that its used-up running or rate limit holds back."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_prefixed() {
        let mut names = ALL.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        assert!(ALL.iter().all(|name| name.starts_with("jobs_")));
    }

    #[test]
    fn outcome_indexes_follow_the_declaration() {
        for (index, outcome) in OutcomeLabel::ALL.iter().enumerate() {
            assert_eq!(outcome.index(), index);
        }
    }
}
