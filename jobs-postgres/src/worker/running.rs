//! The jobs a worker is running now, with their lease tokens, for the heartbeat; and each run's
//! "lease lost" signal, which its job sees through its context.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use jobs_core::JobId;
use tokio::sync::watch;
use uuid::Uuid;

#[derive(Debug)]
struct Lease {
    token: Uuid,
    /// How long each renewal extends it.
    lease: Duration,
    /// When the lease runs out by this process's clock, as of the last renewal.
    expires: Instant,
    /// Set once the database said the token no longer holds the job; the job's context sees it.
    lost: watch::Sender<bool>,
    /// The run is over and its outcome handed to be written. A heartbeat that misses the job
    /// then most likely raced the outcome's write (which clears the token): not worth a warning.
    outcome_pending: bool,
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

/// Running jobs by id, shared by the executors and the heartbeat.
#[derive(Debug, Clone, Default)]
pub struct RunningJobs {
    leases: Arc<Mutex<HashMap<JobId, Lease>>>,
}

impl RunningJobs {
    fn with_leases<T>(&self, action: impl FnOnce(&mut HashMap<JobId, Lease>) -> T) -> T {
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        action(&mut leases)
    }

    /// Records a job that started running under `token`, leased for `lease` from `claimed_at`
    /// (when the claim was sent, or later). Returns the run's "lease lost" signal.
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
                id,
                Lease {
                    token,
                    lease,
                    expires,
                    lost,
                    outcome_pending: false,
                },
            )
        });
        signal
    }

    /// Notes that the run of `id` is over and its outcome about to be written: its lease is
    /// still renewed until then, but a renewal that misses it is no news (see [`renewed`]).
    ///
    /// [`renewed`]: Self::renewed
    pub fn outcome_pending(&self, id: JobId) {
        self.with_leases(|leases| {
            if let Some(lease) = leases.get_mut(&id) {
                lease.outcome_pending = true;
            }
        });
    }

    /// Notes that the lease of run `(id, token)` was found lost by a write fenced by its token;
    /// the job is told.
    pub fn mark_lost(&self, id: JobId, token: Uuid) {
        self.with_leases(|leases| {
            if let Some(lease) = leases.get_mut(&id) {
                if lease.token == token {
                    lease.lost.send_replace(true);
                }
            }
        });
    }

    /// Forgets a job whose run is over.
    pub fn remove(&self, id: JobId) {
        self.with_leases(|leases| leases.remove(&id));
    }

    /// The jobs whose leases are still believed held, with their tokens and leases.
    pub fn held(&self) -> Vec<(JobId, Uuid, Duration)> {
        self.with_leases(|leases| {
            leases
                .iter()
                .filter(|(_, lease)| !lease.is_lost())
                .map(|(id, lease)| (*id, lease.token, lease.lease))
                .collect()
        })
    }

    /// Applies a heartbeat's answer: `renewed` now run out their lease from `sent_at`; the other
    /// `asked` jobs lost their lease, which their jobs are told. Returns the ids newly found
    /// lost while still running (not those whose outcome was pending: the write may simply
    /// have cleared the token first; the write itself reports a lost lease).
    pub fn renewed(
        &self,
        asked: &[(JobId, Uuid, Duration)],
        renewed: &[JobId],
        sent_at: Instant,
    ) -> Vec<JobId> {
        self.with_leases(|leases| {
            let mut lost = Vec::new();
            for (id, token, lease) in asked {
                let Some(entry) = leases.get_mut(id) else {
                    continue;
                };
                if entry.token != *token {
                    continue;
                }
                if renewed.contains(id) {
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
        let renewed: &[JobId] = if still_held { &[id] } else { &[] };
        self.renewed(&[(id, token, lease)], renewed, sent_at);
        self.state_of(id, token)
    }

    /// Whether run `(id, token)` is tracked, and whether its lease was found lost.
    pub fn state_of(&self, id: JobId, token: Uuid) -> Renewal {
        self.with_leases(|leases| match leases.get(&id) {
            Some(lease) if lease.token == token => {
                if lease.is_lost() {
                    Renewal::Lost
                } else {
                    Renewal::Renewed
                }
            }
            _ => Renewal::Unknown,
        })
    }

    /// Whether the job's lease may still hold: not found lost, and not past its expiry.
    pub fn may_hold(&self, id: JobId) -> bool {
        self.with_leases(|leases| {
            leases
                .get(&id)
                .is_some_and(|lease| !lease.is_lost() && Instant::now() < lease.expires)
        })
    }

    /// How many jobs are running.
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
        assert!(running.may_hold(7));
        assert_eq!(
            running.renewed(&[(7, token, lease)], &[7], now),
            Vec::<JobId>::new()
        );
        assert!(!*lost.borrow());
        assert_eq!(running.renewed(&[(7, token, lease)], &[], now), vec![7]);
        assert!(*lost.borrow());
        assert!(!running.may_hold(7));
        assert!(running.held().is_empty());
        assert_eq!(running.state_of(7, token), Renewal::Lost);
        assert_eq!(running.state_of(7, Uuid::new_v4()), Renewal::Unknown);
    }

    #[test]
    fn a_heartbeat_racing_an_outcome_write_is_no_news() {
        let running = RunningJobs::default();
        let token = Uuid::new_v4();
        let now = Instant::now();
        let lease = Duration::from_secs(30);
        let _lost = running.insert(7, token, lease, now);
        running.outcome_pending(7);
        assert_eq!(
            running.renewed(&[(7, token, lease)], &[], now),
            Vec::<JobId>::new()
        );
        assert!(!running.may_hold(7), "not retried once the token is gone");
    }
}
