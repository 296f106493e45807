//! What the worker records per job: runs by outcome, run time and pickup latency, through
//! handles kept per kind and queue so that a run costs no label allocation; and the rare
//! events (dropped outcomes, rescues), recorded directly.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use ::metrics::{counter, histogram, Counter, Histogram, SharedString};

use super::{
    labels, DropReason, OutcomeLabel, OUTBOX_DUPLICATE_IDS_TOTAL, OUTCOMES_DROPPED_TOTAL,
    PICKUP_LATENCY_SECONDS, RESCUED_TOTAL, RESCUES_REFUSED_TOTAL, RUNS_TOTAL, RUN_SECONDS,
};

/// The series of one kind in one queue, each registered with the recorder the first time it is
/// recorded.
#[derive(Debug)]
struct Series {
    kind: &'static str,
    queue: SharedString,
    runs: [OnceLock<Counter>; OutcomeLabel::ALL.len()],
    run_seconds: OnceLock<Histogram>,
    pickup_latency: OnceLock<Histogram>,
}

impl Series {
    fn new(kind: &'static str, queue: &str) -> Self {
        Self {
            kind,
            queue: SharedString::from(queue.to_owned()),
            runs: std::array::from_fn(|_| OnceLock::new()),
            run_seconds: OnceLock::new(),
            pickup_latency: OnceLock::new(),
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
/// only jobs it can claim), fixed when it starts.
#[derive(Debug, Default)]
pub(crate) struct WorkerMetrics {
    /// By kind, then queue.
    series: HashMap<&'static str, HashMap<String, Series>>,
}

impl WorkerMetrics {
    /// The series of `kinds` in `queues`.
    pub(crate) fn new<'a>(
        kinds: impl IntoIterator<Item = &'static str>,
        queues: impl IntoIterator<Item = &'a str> + Clone,
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
        Self { series }
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
        match self.series(kind, queue) {
            Some(series) => {
                series.runs(outcome).increment(1);
                series.run_seconds().record(seconds);
            }
            None => {
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
