//! The jobs a worker is running now, with their lease tokens, for the heartbeat; and each run's
//! "lease lost" and "cancel requested" signals, which its job sees through its context.
//!
//! A run is known by its job id *and* its lease token: a worker that lost a job's lease may claim
//! the same job again while the stale run still goes on, and then holds two runs of one job.
//! Every entry is keyed by both, so the stale run's end (its removal, its pending outcome, its
//! lost lease) never touches the live run's entry, nor does its start replace it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use jobs_core::JobId;
use tokio::sync::watch;
use uuid::Uuid;

use crate::store::RenewedLease;

/// One run: a job under the lease token of one claim.
type Run = (JobId, Uuid);

#[derive(Debug)]
struct Lease {
    /// How long each renewal extends it.
    lease: Duration,
    /// When the lease runs out by this process's clock, as of the last renewal.
    expires: Instant,
    /// Set once the database said the token no longer holds the job; the job's context sees it.
    lost: watch::Sender<bool>,
    /// Set once the database said the job was asked to stop; the job's context sees it.
    cancel: watch::Sender<bool>,
    /// The run is over and its outcome handed to be written. A heartbeat that misses the job
    /// then most likely raced the outcome's write (which clears the token): not worth a warning.
    outcome_pending: bool,
    /// The job's kind has a running limit: writing its outcome frees room under the limit.
    frees_running_limit: bool,
}

impl Lease {
    fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }
}

/// What a renewal's answer says about one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// The lease was renewed.
    Renewed,
    /// The lease is gone (found now or earlier).
    Lost,
    /// The run is not tracked under this token any more: it is over.
    Unknown,
}

/// Running jobs by `(id, lease token)`, shared by the executors and the heartbeat.
#[derive(Debug, Clone, Default)]
pub struct RunningJobs {
    leases: Arc<Mutex<HashMap<Run, Lease>>>,
}

impl RunningJobs {
    fn with_leases<T>(&self, action: impl FnOnce(&mut HashMap<Run, Lease>) -> T) -> T {
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        action(&mut leases)
    }

    /// Records a job that started running under `token`, leased for `lease` from `claimed_at`
    /// (when the claim was sent, or later). Returns the run's "lease lost" signal. Another run of
    /// the same job, under another token, keeps its own entry.
    pub fn insert(
        &self,
        id: JobId,
        token: Uuid,
        lease: Duration,
        claimed_at: Instant,
    ) -> watch::Receiver<bool> {
        let (lost, signal) = watch::channel(false);
        let expires = claimed_at + lease;
        self.with_leases(|leases| {
            leases.insert(
                (id, token),
                Lease {
                    lease,
                    expires,
                    lost,
                    cancel: watch::Sender::new(false),
                    outcome_pending: false,
                    frees_running_limit: false,
                },
            )
        });
        signal
    }

    /// Notes that run `(id, token)` is over and its outcome about to be written: its lease is
    /// still renewed until then, but a renewal that misses it is no news (see [`renewed`]).
    /// `frees_running_limit` says whether its kind has a running limit, under which writing the
    /// outcome frees room (see [`frees_running_limit`](Self::frees_running_limit)).
    ///
    /// [`renewed`]: Self::renewed
    pub fn outcome_pending(&self, id: JobId, token: Uuid, frees_running_limit: bool) {
        self.with_leases(|leases| {
            if let Some(lease) = leases.get_mut(&(id, token)) {
                lease.outcome_pending = true;
                lease.frees_running_limit = frees_running_limit;
            }
        });
    }

    /// Notes that the lease of run `(id, token)` was found lost by a write fenced by its token;
    /// the job is told.
    pub fn mark_lost(&self, id: JobId, token: Uuid) {
        self.with_leases(|leases| {
            if let Some(lease) = leases.get_mut(&(id, token)) {
                lease.lost.send_replace(true);
            }
        });
    }

    /// The "cancel requested" signal of run `(id, token)`, `None` when it is not tracked.
    pub fn cancel_signal(&self, id: JobId, token: Uuid) -> Option<watch::Receiver<bool>> {
        self.with_leases(|leases| {
            leases
                .get(&(id, token))
                .map(|lease| lease.cancel.subscribe())
        })
    }

    /// Tells the runs `(id, token)` among `renewed` whose job was asked to stop (a heartbeat's
    /// answer); returns the ids newly told.
    pub fn cancel_requested(&self, renewed: &[RenewedLease]) -> Vec<JobId> {
        self.with_leases(|leases| {
            renewed
                .iter()
                .filter(|run| run.cancel_requested)
                .filter_map(|run| {
                    let lease = leases.get(&run.run())?;
                    (!lease.cancel.send_replace(true)).then_some(run.id)
                })
                .collect()
        })
    }

    /// Whether writing the outcome of run `(id, token)` frees room under its kind's running
    /// limit (as [`outcome_pending`](Self::outcome_pending) noted).
    pub fn frees_running_limit(&self, id: JobId, token: Uuid) -> bool {
        self.with_leases(|leases| {
            leases
                .get(&(id, token))
                .is_some_and(|lease| lease.frees_running_limit)
        })
    }

    /// Forgets run `(id, token)`, which is over; another run of the job stays.
    pub fn remove(&self, id: JobId, token: Uuid) {
        self.with_leases(|leases| leases.remove(&(id, token)));
    }

    /// The runs whose leases are still believed held, with their tokens and leases.
    pub fn held(&self) -> Vec<(JobId, Uuid, Duration)> {
        self.with_leases(|leases| {
            leases
                .iter()
                .filter(|(_, lease)| !lease.is_lost())
                .map(|((id, token), lease)| (*id, *token, lease.lease))
                .collect()
        })
    }

    /// Applies a heartbeat's answer: the runs `renewed`, `(id, token)`, now run out their lease
    /// from `sent_at`; the other `asked` runs lost their lease, which their jobs are told.
    /// Returns the ids newly found lost while still running (not those whose outcome was
    /// pending: the write may simply have cleared the token first; the write itself reports a
    /// lost lease).
    pub fn renewed(
        &self,
        asked: &[(JobId, Uuid, Duration)],
        renewed: &[(JobId, Uuid)],
        sent_at: Instant,
    ) -> Vec<JobId> {
        self.with_leases(|leases| {
            let mut lost = Vec::new();
            for (id, token, lease) in asked {
                let Some(entry) = leases.get_mut(&(*id, *token)) else {
                    continue;
                };
                if renewed.contains(&(*id, *token)) {
                    entry.expires = entry.expires.max(sent_at + *lease);
                } else if !entry.is_lost() {
                    entry.lost.send_replace(true);
                    if !entry.outcome_pending {
                        lost.push(*id);
                    }
                }
            }
            lost
        })
    }

    /// Where the lease of run `(id, token)` stands after a renewal of it alone that was sent at
    /// `sent_at` and answered `still_held`; tells the job when it is lost.
    pub fn renewed_one(
        &self,
        id: JobId,
        token: Uuid,
        still_held: bool,
        sent_at: Instant,
        lease: Duration,
    ) -> Renewal {
        let renewed: &[(JobId, Uuid)] = if still_held { &[(id, token)] } else { &[] };
        self.renewed(&[(id, token, lease)], renewed, sent_at);
        self.state_of(id, token)
    }

    /// Whether run `(id, token)` is tracked, and whether its lease was found lost.
    pub fn state_of(&self, id: JobId, token: Uuid) -> Renewal {
        self.with_leases(|leases| match leases.get(&(id, token)) {
            Some(lease) if lease.is_lost() => Renewal::Lost,
            Some(_) => Renewal::Renewed,
            None => Renewal::Unknown,
        })
    }

    /// Whether the lease of run `(id, token)` may still hold: not found lost, and not past its
    /// expiry.
    pub fn may_hold(&self, id: JobId, token: Uuid) -> bool {
        self.with_leases(|leases| {
            leases
                .get(&(id, token))
                .is_some_and(|lease| !lease.is_lost() && Instant::now() < lease.expires)
        })
    }

    /// How many runs are going on (two runs of one job, under different tokens, count twice).
    pub fn len(&self) -> usize {
        self.with_leases(|leases| leases.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heartbeat_that_misses_a_job_tells_its_run() {
        let running = RunningJobs::default();
        let token = Uuid::new_v4();
        let now = Instant::now();
        let lease = Duration::from_secs(30);
        let lost = running.insert(7, token, lease, now);
        assert!(running.may_hold(7, token));
        assert_eq!(
            running.renewed(&[(7, token, lease)], &[(7, token)], now),
            Vec::<JobId>::new()
        );
        assert!(!*lost.borrow());
        assert_eq!(running.renewed(&[(7, token, lease)], &[], now), vec![7]);
        assert!(*lost.borrow());
        assert!(!running.may_hold(7, token));
        assert!(running.held().is_empty());
        assert_eq!(running.state_of(7, token), Renewal::Lost);
        assert_eq!(running.state_of(7, Uuid::new_v4()), Renewal::Unknown);
    }

    #[test]
    fn a_cancel_request_tells_its_run_once() {
        let running = RunningJobs::default();
        let (stale, live) = (Uuid::new_v4(), Uuid::new_v4());
        let lease = Duration::from_secs(30);
        let _ = running.insert(7, stale, lease, Instant::now());
        let _ = running.insert(7, live, lease, Instant::now());
        let signal = running.cancel_signal(7, live).unwrap();
        let stale_signal = running.cancel_signal(7, stale).unwrap();
        let answer = |requested| {
            [RenewedLease {
                id: 7,
                lease_token: live,
                cancel_requested: requested,
            }]
        };
        assert!(running.cancel_requested(&answer(false)).is_empty());
        assert!(!*signal.borrow());
        assert_eq!(running.cancel_requested(&answer(true)), vec![7]);
        assert!(*signal.borrow());
        assert!(!*stale_signal.borrow(), "only the run answered for is told");
        assert!(running.cancel_requested(&answer(true)).is_empty(), "once");
        assert!(running.cancel_signal(8, live).is_none());
    }

    #[test]
    fn a_heartbeat_racing_an_outcome_write_is_no_news() {
        let running = RunningJobs::default();
        let token = Uuid::new_v4();
        let now = Instant::now();
        let lease = Duration::from_secs(30);
        let _lost = running.insert(7, token, lease, now);
        running.outcome_pending(7, token, false);
        assert_eq!(
            running.renewed(&[(7, token, lease)], &[], now),
            Vec::<JobId>::new()
        );
        assert!(
            !running.may_hold(7, token),
            "not retried once the token is gone"
        );
    }

    /// Two runs of one job: the stale one (lease lost, then the job claimed again by the same
    /// worker) and the live one.
    fn two_runs() -> (RunningJobs, Uuid, Uuid, watch::Receiver<bool>) {
        let running = RunningJobs::default();
        let (stale, live) = (Uuid::new_v4(), Uuid::new_v4());
        let now = Instant::now();
        let lease = Duration::from_secs(30);
        let _stale_lost = running.insert(7, stale, lease, now);
        let live_lost = running.insert(7, live, lease, now);
        (running, stale, live, live_lost)
    }

    #[test]
    fn claiming_a_job_again_keeps_the_stale_runs_entry_apart() {
        let (running, stale, live, _) = two_runs();
        assert_eq!(running.len(), 2);
        assert_eq!(running.state_of(7, stale), Renewal::Renewed);
        assert_eq!(running.state_of(7, live), Renewal::Renewed);
        let mut held = running.held();
        held.sort();
        let mut expected = vec![
            (7, stale, Duration::from_secs(30)),
            (7, live, Duration::from_secs(30)),
        ];
        expected.sort();
        assert_eq!(held, expected);
    }

    #[test]
    fn the_stale_runs_end_leaves_the_live_run_alone() {
        let (running, stale, live, live_lost) = two_runs();
        running.outcome_pending(7, stale, false);
        running.mark_lost(7, stale);
        running.remove(7, stale);
        assert_eq!(running.state_of(7, stale), Renewal::Unknown);
        assert_eq!(running.state_of(7, live), Renewal::Renewed);
        assert!(running.may_hold(7, live));
        assert!(!*live_lost.borrow());
        assert_eq!(
            running.held(),
            vec![(7, live, Duration::from_secs(30))],
            "the live run is still heartbeated"
        );
    }

    #[test]
    fn a_heartbeat_renewing_the_live_run_finds_the_stale_one_lost() {
        let (running, stale, live, live_lost) = two_runs();
        let now = Instant::now();
        let asked = running.held();
        assert_eq!(running.renewed(&asked, &[(7, live)], now), vec![7]);
        assert_eq!(running.state_of(7, stale), Renewal::Lost);
        assert_eq!(running.state_of(7, live), Renewal::Renewed);
        assert!(!*live_lost.borrow());
        assert!(!running.may_hold(7, stale));
        assert!(running.may_hold(7, live));
    }

    #[test]
    fn the_live_runs_pending_outcome_is_its_own() {
        let (running, stale, live, _) = two_runs();
        running.outcome_pending(7, live, false);
        let now = Instant::now();
        let asked = running.held();
        assert_eq!(
            running.renewed(&asked, &[], now),
            vec![7],
            "only the stale run, still running, is news"
        );
        assert_eq!(running.state_of(7, stale), Renewal::Lost);
    }
}
