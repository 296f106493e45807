//! The worker's throughput bookkeeping: runs ended per queue and kind, by outcome, counted in
//! memory as they end (an atomic add, no lock, no statement) and taken every few seconds by the
//! presence service, which adds them to the worker's rows of `jobs_throughput`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use super::OutcomeLabel;
use crate::store::throughput::Tally;

/// The outcomes the throughput counts; the others (snoozed, interrupted, abandoned) used no
/// attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    Done,
    Retried,
    Dead,
    Cancelled,
}

impl Ended {
    /// What a run that ended with `outcome` counts as, if anything.
    pub(crate) fn of(outcome: OutcomeLabel) -> Option<Self> {
        match outcome {
            OutcomeLabel::Done => Some(Ended::Done),
            OutcomeLabel::Retry => Some(Ended::Retried),
            OutcomeLabel::Dead => Some(Ended::Dead),
            OutcomeLabel::Cancelled => Some(Ended::Cancelled),
            OutcomeLabel::Snoozed | OutcomeLabel::Interrupted | OutcomeLabel::Abandoned => None,
        }
    }

    /// What a job rescued into `state` (`ready`, `dead`, or `cancelled` when an operator had
    /// asked to cancel it) counts as.
    pub(crate) fn of_rescue(state: &str) -> Option<Self> {
        match state {
            "ready" => Some(Ended::Retried),
            "dead" => Some(Ended::Dead),
            "cancelled" => Some(Ended::Cancelled),
            _ => None,
        }
    }
}

/// The runs of one queue and kind ended since they were last taken.
#[derive(Debug, Default)]
pub(crate) struct EndedRuns {
    counts: [AtomicU64; 4],
}

impl EndedRuns {
    /// Counts one run that ended as `ended`.
    pub(crate) fn count(&self, ended: Ended) {
        self.counts[ended as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Takes the counts (leaving zeros) as a tally of `queue` and `kind`; `None` when all are 0.
    pub(crate) fn take(&self, queue: &str, kind: &str) -> Option<Tally> {
        let [done, retried, dead, cancelled] = std::array::from_fn(|index| {
            i64::try_from(self.counts[index].swap(0, Ordering::Relaxed)).unwrap_or(i64::MAX)
        });
        (done + retried + dead + cancelled > 0).then(|| Tally {
            queue: queue.to_owned(),
            kind: kind.to_owned(),
            done,
            retried,
            dead,
            cancelled,
        })
    }

    /// Adds `tally` back (it could not be written).
    pub(crate) fn give_back(&self, tally: &Tally) {
        let counts = [tally.done, tally.retried, tally.dead, tally.cancelled];
        for (counter, count) in self.counts.iter().zip(counts) {
            counter.fetch_add(u64::try_from(count).unwrap_or(0), Ordering::Relaxed);
        }
    }
}

/// Runs of queues and kinds a worker did not expect (none, as it claims only its own), by
/// `(kind, queue)`.
#[derive(Debug, Default)]
pub(crate) struct OtherRuns(Mutex<HashMap<(String, String), EndedRuns>>);

impl OtherRuns {
    fn with<T>(&self, action: impl FnOnce(&mut HashMap<(String, String), EndedRuns>) -> T) -> T {
        action(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Counts one run of `kind` in `queue` that ended as `ended`.
    pub(crate) fn count(&self, kind: &str, queue: &str, ended: Ended) {
        self.with(|runs| {
            runs.entry((kind.to_owned(), queue.to_owned()))
                .or_default()
                .count(ended);
        });
    }

    /// Takes every count, leaving none.
    pub(crate) fn take(&self) -> Vec<Tally> {
        self.with(|runs| {
            std::mem::take(runs)
                .into_iter()
                .filter_map(|((kind, queue), ended)| ended.take(&queue, &kind))
                .collect()
        })
    }

    /// Adds `tally` back (it could not be written).
    pub(crate) fn give_back(&self, tally: &Tally) {
        self.with(|runs| {
            runs.entry((tally.kind.clone(), tally.queue.clone()))
                .or_default()
                .give_back(tally);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taking_the_counts_leaves_zeros_and_giving_back_restores_them() {
        let runs = EndedRuns::default();
        assert_eq!(runs.take("q", "k"), None);
        runs.count(Ended::Done);
        runs.count(Ended::Done);
        runs.count(Ended::Dead);
        let tally = runs.take("q", "k").unwrap();
        assert_eq!((tally.done, tally.retried, tally.dead), (2, 0, 1));
        assert_eq!(runs.take("q", "k"), None);
        runs.give_back(&tally);
        runs.count(Ended::Cancelled);
        let again = runs.take("q", "k").unwrap();
        assert_eq!((again.done, again.dead, again.cancelled), (2, 1, 1));
    }
}
