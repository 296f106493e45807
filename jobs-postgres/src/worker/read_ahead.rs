//! Jobs claimed ahead of free slots, while a backlog of short jobs lasts.
//!
//! A claim costs about the same whether it takes 16 jobs or 128, so a worker that drains short
//! jobs spends most of the database's time on statements that each take a few. When the last
//! claim filled every free slot and every slot then freed within the claim batch window (the
//! jobs run shorter than the window), the producer claims beyond its free slots as many jobs as
//! its slots started within [`SPAN`] at the pace of the last claim's jobs, up to
//! [`WorkerConfig::claim_ahead`](super::WorkerConfig::claim_ahead), and keeps them here, in
//! claim order, to start as slots free. Once fewer wait than a claim takes ahead, the next
//! claim goes out, for jobs ahead alone, while they start: the slots start jobs while it runs,
//! rather than wait for it once none is left.
//!
//! A job read ahead is claimed like any other: its row is `running` under this worker's lease,
//! the heartbeat renews it, and it counts as this worker's from the claim on. So:
//! - it starts after the jobs claimed before it, whatever arrives meanwhile: a job of a higher
//!   priority, or a pause of its queue, waits behind at most the jobs read ahead;
//! - another worker cannot take it: jobs wait here at most [`LONGEST_WAIT`], and are then handed
//!   back (the attempt given back, the job's place in the claim order kept), so that a backlog
//!   whose jobs turned long is not held by one worker; the hand-backs are outcomes, written by
//!   the completer, and the producer claims again, from the front, once they are written (or
//!   after [`LONGEST_WAIT`], when the writes are slow);
//! - a graceful shutdown hands them back the same way; a crash or a stop at once leaves them
//!   `running` until their leases expire, like the jobs that were running, their attempt spent.
//!   So no job on its last attempt is claimed ahead (see `claimed_prefix!` in the store).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::store::ClaimedJob;

/// Longest a job waits here for a slot before it is handed back.
pub const LONGEST_WAIT: Duration = Duration::from_millis(100);

/// How far ahead claims look: at the pace of the last claim's jobs, the jobs claimed ahead all
/// start within this span. A quarter of [`LONGEST_WAIT`], so that jobs are handed back only
/// when they turn several times longer than those before them.
pub const SPAN: Duration = Duration::from_millis(25);

/// How many jobs start within [`SPAN`] when `jobs` jobs ran, one after another in the slots,
/// within `took`.
fn jobs_within_span(jobs: usize, took: Duration) -> usize {
    let per_second = jobs as f64 / took.as_secs_f64().max(1e-6);
    // Saturates: a pace beyond any count is capped by the claim's own limit.
    (per_second * SPAN.as_secs_f64()) as usize
}

/// The return of a producer's last claim, from which the slots' pace is measured: when it was,
/// and how many jobs the producer had started before and after it took the claim's jobs in
/// (those it started at once, on free slots, are between).
#[derive(Debug, Clone, Copy)]
pub struct PaceMark {
    at: Instant,
    started_before: u64,
    started_after: u64,
}

impl PaceMark {
    /// A claim returned `at`, `started_before` jobs having started before its jobs were taken
    /// in and `started_after` after.
    pub fn new(at: Instant, started_before: u64, started_after: u64) -> Self {
        Self {
            at,
            started_before,
            started_after,
        }
    }

    /// How many jobs start within [`SPAN`] at the pace of every start since the claim returned
    /// (`started` in all by now, its own jobs among them): the pace of the slots once they have
    /// all run.
    pub fn since_return(&self, started: u64) -> usize {
        jobs_within_span(count(started - self.started_before), self.at.elapsed())
    }

    /// How many jobs start within [`SPAN`] at the pace of the starts after the claim's jobs were
    /// taken in, by `now` (`started` in all): the pace of the slots while a job waited for
    /// each one that freed.
    pub fn since_taken_in(&self, started: u64, now: Instant) -> usize {
        jobs_within_span(count(started - self.started_after), now - self.at)
    }
}

/// `started` as a count of jobs.
fn count(started: u64) -> usize {
    usize::try_from(started).unwrap_or(usize::MAX)
}

/// A job claimed, with what its run needs from the claim.
#[derive(Debug)]
pub struct ClaimedRun {
    /// The job.
    pub job: ClaimedJob,
    /// Turns `true` when the heartbeat finds the lease lost.
    pub lease_lost: watch::Receiver<bool>,
    /// When the claim's statement returned: the wait for a slot counts from then.
    pub claimed_at: Instant,
}

/// A job claimed ahead, waiting for a slot.
#[derive(Debug)]
struct Waiting {
    run: ClaimedRun,
    /// When it is handed back if no slot has taken it.
    hand_back_at: Instant,
}

/// The jobs claimed ahead, oldest claim first.
#[derive(Debug, Default)]
pub struct ReadAhead {
    runs: VecDeque<Waiting>,
}

impl ReadAhead {
    /// Whether no job waits.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// How many jobs wait.
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// Keeps `run` until a slot frees.
    pub fn push(&mut self, run: ClaimedRun) {
        let hand_back_at = run.claimed_at + LONGEST_WAIT;
        self.runs.push_back(Waiting { run, hand_back_at });
    }

    /// The job claimed first, to start now.
    pub fn pop(&mut self) -> Option<ClaimedRun> {
        self.runs.pop_front().map(|waiting| waiting.run)
    }

    /// When the job claimed first is to be handed back; `None` when no job waits.
    pub fn hand_back_at(&self) -> Option<Instant> {
        self.runs.front().map(|waiting| waiting.hand_back_at)
    }

    /// Every job waiting, to hand back.
    pub fn take_all(&mut self) -> Vec<ClaimedRun> {
        self.runs.drain(..).map(|waiting| waiting.run).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_look_ahead_as_far_as_the_pace_of_the_last_jobs_reaches() {
        // 16 jobs in 1 ms: 16,000 a second, 400 within the 25 ms span.
        assert_eq!(jobs_within_span(16, Duration::from_millis(1)), 400);
        // 16 jobs in 100 ms: 4 within the span.
        assert_eq!(jobs_within_span(16, Duration::from_millis(100)), 4);
        // Slower than one job per span: none.
        assert_eq!(jobs_within_span(1, Duration::from_millis(30)), 0);
        assert!(jobs_within_span(64, Duration::ZERO) > 1_000_000);
    }

    #[test]
    fn the_pace_while_jobs_waited_leaves_out_the_jobs_started_at_once() {
        let returned_at = Instant::now() - Duration::from_millis(100);
        // 10 jobs had started before the claim returned; it started 4 at once on free slots.
        let pace = PaceMark::new(returned_at, 10, 14);
        // 16 more started from the read-ahead in the next 10 ms: 40 within the 25 ms span.
        assert_eq!(
            pace.since_taken_in(30, returned_at + Duration::from_millis(10)),
            40
        );
        // Once all have run, every start since the return counts: 20 in at least 100 ms.
        assert!(pace.since_return(30) <= 5);
    }
}
