//! A running job's own hold on its lease: what `ctx.renew_lease()` calls.

use std::sync::Weak;
use std::time::{Duration, Instant};

use jobs_core::{BoxFuture, JobId, LeaseControl, LeaseError};
use uuid::Uuid;

use super::running::Renewal;
use super::Shared;
use crate::store;

/// Renews the lease of one run, `(id, token)`, on demand: one heartbeat statement for that job
/// alone, sent from the job's own task, so it works even while the worker's heartbeat is
/// starved. Holds the worker weakly: a context kept after the worker stopped renews nothing.
#[derive(Debug)]
pub struct JobLease {
    pub(crate) shared: Weak<Shared>,
    pub(crate) id: JobId,
    pub(crate) token: Uuid,
    /// The lease of the job's kind.
    pub(crate) lease: Duration,
}

impl LeaseControl for JobLease {
    fn renew(&self) -> BoxFuture<'_, Result<(), LeaseError>> {
        Box::pin(async move {
            let shared = self.shared.upgrade().ok_or(LeaseError::NotRunning)?;
            if *shared.abandoned.borrow() {
                // Stopped at once: the lease is left to expire.
                return Err(LeaseError::NotRunning);
            }
            match shared.running.state_of(self.id, self.token) {
                Renewal::Renewed => {}
                Renewal::Lost => return Err(LeaseError::Lost),
                Renewal::Unknown => return Err(LeaseError::NotRunning),
            }
            let lease = self.lease;
            let sent_at = Instant::now();
            let renewed = store::heartbeat(&shared.pool, &[(self.id, self.token, lease)])
                .await
                .map_err(|error| LeaseError::Unavailable {
                    reason: error.to_string(),
                })?;
            shared.running.cancel_requested(&renewed);
            let still_held = renewed.iter().any(|run| run.run() == (self.id, self.token));
            match shared
                .running
                .renewed_one(self.id, self.token, still_held, sent_at, lease)
            {
                Renewal::Renewed => Ok(()),
                Renewal::Lost => {
                    tracing::warn!(
                        job.id = self.id,
                        "lease lost (found by the job's own renewal): another worker may run this job; its outcome here will be dropped"
                    );
                    Err(LeaseError::Lost)
                }
                Renewal::Unknown => Err(LeaseError::NotRunning),
            }
        })
    }
}
