//! What the worker records per job: runs by outcome, run time and pickup latency, through
//! handles kept per kind and queue so that a run costs no label allocation; and the rare
//! events (dropped outcomes, rescues), recorded directly. The same handles count the runs that
//! ended for the throughput bookkeeping ([`super::throughput`]), when it is on.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use ::metrics::{counter, histogram, Counter, Histogram, SharedString};

use super::throughput::{Ended, EndedRuns, OtherRuns};
use super::{
    labels, DropReason, OutcomeLabel, OUTBOX_DUPLICATE_IDS_TOTAL, OUTCOMES_DROPPED_TOTAL,
    PICKUP_LATENCY_SECONDS, RESCUED_TOTAL, RESCUES_REFUSED_TOTAL, RUNS_TOTAL, RUN_SECONDS,
};
use crate::store::throughput::Tally;

/// The series of one kind in one queue, each registered with the recorder the first time it is
/// recorded.
#[derive(Debug)]
struct Series {
    kind: &'static str,
    queue: SharedString,
    runs: [OnceLock<Counter>; OutcomeLabel::ALL.len()],
    run_seconds: OnceLock<Histogram>,
    pickup_latency: OnceLock<Histogram>,
    /// Runs ended since the throughput was last taken.
    ended: EndedRuns,
}

impl Series {
    fn new(kind: &'static str, queue: &str) -> Self {
        Self {
            kind,
            queue: SharedString::from(queue.to_owned()),
            runs: std::array::from_fn(|_| OnceLock::new()),
            run_seconds: OnceLock::new(),
            pickup_latency: OnceLock::new(),
            ended: EndedRuns::default(),
        }
    }

    fn runs(&self, outcome: OutcomeLabel) -> &Counter {
        self.runs[outcome.index()].get_or_init(|| {
            counter!(
                RUNS_TOTAL,
                labels::KIND => self.kind,
                labels::QUEUE => self.queue.clone(),
                labels::OUTCOME => outcome.as_str()
            )
        })
    }

    fn run_seconds(&self) -> &Histogram {
        self.run_seconds.get_or_init(|| {
            histogram!(RUN_SECONDS, labels::KIND => self.kind, labels::QUEUE => self.queue.clone())
        })
    }

    fn pickup_latency(&self) -> &Histogram {
        self.pickup_latency.get_or_init(|| {
            histogram!(
                PICKUP_LATENCY_SECONDS,
                labels::KIND => self.kind,
                labels::QUEUE => self.queue.clone()
            )
        })
    }
}

/// A worker's per-job metrics: the series of every kind it runs in every queue it runs (the
/// only jobs it can claim), fixed when it starts; and, when `count_throughput`, the runs ended
/// since the throughput was last taken.
#[derive(Debug, Default)]
pub(crate) struct WorkerMetrics {
    /// By kind, then queue.
    series: HashMap<&'static str, HashMap<String, Series>>,
    /// Whether runs ended are counted for the throughput.
    count_throughput: bool,
    /// Runs ended of kinds or queues outside `series`.
    other_runs: OtherRuns,
}

impl WorkerMetrics {
    /// The series of `kinds` in `queues`; runs ended are counted for the throughput when
    /// `count_throughput`.
    pub(crate) fn new<'a>(
        kinds: impl IntoIterator<Item = &'static str>,
        queues: impl IntoIterator<Item = &'a str> + Clone,
        count_throughput: bool,
    ) -> Self {
        let series = kinds
            .into_iter()
            .map(|kind| {
                let by_queue = queues
                    .clone()
                    .into_iter()
                    .map(|queue| (queue.to_owned(), Series::new(kind, queue)))
                    .collect();
                (kind, by_queue)
            })
            .collect();
        Self {
            series,
            count_throughput,
            other_runs: OtherRuns::default(),
        }
    }

    fn series(&self, kind: &str, queue: &str) -> Option<&Series> {
        self.series.get(kind)?.get(queue)
    }

    /// A job of `kind` in `queue` was claimed `latency` after it became due.
    pub(crate) fn job_picked_up(&self, kind: &str, queue: &str, latency: Duration) {
        let seconds = latency.as_secs_f64();
        match self.series(kind, queue) {
            Some(series) => series.pickup_latency().record(seconds),
            None => histogram!(
                PICKUP_LATENCY_SECONDS,
                labels::KIND => kind.to_owned(),
                labels::QUEUE => queue.to_owned()
            )
            .record(seconds),
        }
    }

    /// A run of a job of `kind` in `queue` ended with `outcome` after `run_time`.
    pub(crate) fn job_finished(
        &self,
        kind: &str,
        queue: &str,
        outcome: OutcomeLabel,
        run_time: Duration,
    ) {
        let seconds = run_time.as_secs_f64();
        let ended = Ended::of(outcome).filter(|_| self.count_throughput);
        match self.series(kind, queue) {
            Some(series) => {
                series.runs(outcome).increment(1);
                series.run_seconds().record(seconds);
                if let Some(ended) = ended {
                    series.ended.count(ended);
                }
            }
            None => {
                if let Some(ended) = ended {
                    self.other_runs.count(kind, queue, ended);
                }
                counter!(
                    RUNS_TOTAL,
                    labels::KIND => kind.to_owned(),
                    labels::QUEUE => queue.to_owned(),
                    labels::OUTCOME => outcome.as_str()
                )
                .increment(1);
                histogram!(
                    RUN_SECONDS,
                    labels::KIND => kind.to_owned(),
                    labels::QUEUE => queue.to_owned()
                )
                .record(seconds);
            }
        }
    }
}

impl WorkerMetrics {
    /// This process's rescue brought back a job of `kind` in `queue` as `state` (`ready`: a
    /// retry, `dead`, or `cancelled` when an operator had asked to cancel it), recorded in the
    /// metrics and the throughput.
    pub(crate) fn job_rescued(&self, kind: &str, queue: &str, state: &str) {
        rescued(kind, queue, state);
        let Some(ended) = Ended::of_rescue(state).filter(|_| self.count_throughput) else {
            return;
        };
        match self.series(kind, queue) {
            Some(series) => series.ended.count(ended),
            None => self.other_runs.count(kind, queue, ended),
        }
    }

    /// Takes the runs ended since the last call (or [`give_back`](Self::give_back)), per queue
    /// and kind, leaving zeros: what the throughput bookkeeping adds to the database.
    pub(crate) fn take_throughput(&self) -> Vec<Tally> {
        let mut tallies: Vec<Tally> = self
            .series
            .values()
            .flat_map(HashMap::values)
            .filter_map(|series| series.ended.take(series.queue.as_ref(), series.kind))
            .collect();
        tallies.extend(self.other_runs.take());
        tallies
    }

    /// Adds back `tallies` taken by [`take_throughput`](Self::take_throughput) that could not be
    /// written, for the next time.
    pub(crate) fn give_back(&self, tallies: &[Tally]) {
        for tally in tallies {
            match self.series(&tally.kind, &tally.queue) {
                Some(series) => series.ended.give_back(tally),
                None => self.other_runs.give_back(tally),
            }
        }
    }
}

/// An outcome was decided but not written, for `reason`.
pub(crate) fn outcome_dropped(reason: DropReason) {
    counter!(OUTCOMES_DROPPED_TOTAL, labels::REASON => reason.as_str()).increment(1);
}

/// The database refused this process's rescue of a job of `kind` in `queue`.
pub(crate) fn rescue_refused(kind: &str, queue: &str) {
    counter!(
        RESCUES_REFUSED_TOTAL,
        labels::KIND => kind.to_owned(),
        labels::QUEUE => queue.to_owned()
    )
    .increment(1);
}

/// This process's relay parked an outbox row whose message id the broker held for another
/// message.
pub(crate) fn outbox_duplicate_id() {
    counter!(OUTBOX_DUPLICATE_IDS_TOTAL).increment(1);
}

/// This process's rescue brought back a job of `kind` in `queue` as `state`.
pub(crate) fn rescued(kind: &str, queue: &str, state: &str) {
    counter!(
        RESCUED_TOTAL,
        labels::KIND => kind.to_owned(),
        labels::QUEUE => queue.to_owned(),
        labels::STATE => state.to_owned()
    )
    .increment(1);
}
