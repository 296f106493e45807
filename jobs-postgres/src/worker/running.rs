//! The jobs a worker is running now, with their lease tokens, for the heartbeat.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use jobs_core::JobId;
use uuid::Uuid;

#[derive(Debug, Clone, Copy)]
struct Lease {
    token: Uuid,
    /// When the lease runs out by this process's clock, as of the last renewal.
    expires: Instant,
    lost: bool,
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

    /// Records a job that started running under `token`, leased for `lease` from now.
    pub fn insert(&self, id: JobId, token: Uuid, lease: Duration) {
        let expires = Instant::now() + lease;
        self.with_leases(|leases| {
            leases.insert(
                id,
                Lease {
                    token,
                    expires,
                    lost: false,
                },
            )
        });
    }

    /// Forgets a job whose run is over.
    pub fn remove(&self, id: JobId) {
        self.with_leases(|leases| leases.remove(&id));
    }

    /// The jobs whose leases are still believed held, with their tokens.
    pub fn held(&self) -> Vec<(JobId, Uuid)> {
        self.with_leases(|leases| {
            leases
                .iter()
                .filter(|(_, lease)| !lease.lost)
                .map(|(id, lease)| (*id, lease.token))
                .collect()
        })
    }

    /// Applies a heartbeat's answer: `renewed` now run out `lease` from `sent_at`; the other
    /// `asked` jobs lost their lease. Returns the ids newly found lost.
    pub fn renewed(
        &self,
        asked: &[(JobId, Uuid)],
        renewed: &[JobId],
        sent_at: Instant,
        lease: Duration,
    ) -> Vec<JobId> {
        self.with_leases(|leases| {
            let mut lost = Vec::new();
            for (id, token) in asked {
                let Some(entry) = leases.get_mut(id) else {
                    continue;
                };
                if entry.token != *token {
                    continue;
                }
                if renewed.contains(id) {
                    entry.expires = sent_at + lease;
                } else if !entry.lost {
                    entry.lost = true;
                    lost.push(*id);
                }
            }
            lost
        })
    }

    /// Whether the job's lease may still hold: not found lost, and not past its expiry.
    pub fn may_hold(&self, id: JobId) -> bool {
        self.with_leases(|leases| {
            leases
                .get(&id)
                .is_some_and(|lease| !lease.lost && Instant::now() < lease.expires)
        })
    }

    /// How many jobs are running.
    pub fn len(&self) -> usize {
        self.with_leases(|leases| leases.len())
    }
}
