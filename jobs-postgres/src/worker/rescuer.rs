//! The rescuer: returns jobs whose lease expired (their worker crashed, was cut off or paused)
//! to ready, or to dead when their attempts are spent, every `rescue_interval`.
//!
//! It stops as soon as the worker stops, even in the middle of a statement: an interrupted
//! rescue is done by the next one, here or in another process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use jobs_core::JobId;

use super::{refusal, Shared};
use crate::metrics;
use crate::periodic::{run_periodically, OnStop, PeriodicService};
use crate::store::{self, ExpiredJob, RescuedJob};

/// Rescues expired leases at once, then every `rescue_interval`, until the worker stops.
pub(crate) async fn rescuer(shared: Arc<Shared>) {
    let mut stopped = shared.stopped.subscribe();
    let stop = async move {
        let _ = stopped.wait_for(|stopped| *stopped).await;
    };
    run_periodically(
        Rescuer { shared },
        Duration::ZERO,
        OnStop::AbandonPass,
        stop,
    )
    .await;
}

/// The rescuer of one worker.
struct Rescuer {
    shared: Arc<Shared>,
}

impl PeriodicService for Rescuer {
    async fn run_pass(&mut self) -> Duration {
        if let Err(error) = rescue_once(&self.shared).await {
            tracing::warn!(%error, "rescuing expired leases failed; will retry");
        }
        self.shared.config.rescue_interval
    }
}

/// How long a job the database refused to rescue is left out of this worker's sweeps before it
/// is tried again (and, if still refused, logged and set aside again).
pub(crate) const SET_ASIDE_FOR: Duration = Duration::from_secs(600);

/// Jobs the database refused to rescue, left out of this worker's sweeps for [`SET_ASIDE_FOR`] so
/// that one such row does not cost every sweep a failed statement and a row-by-row pass.
#[derive(Debug, Default)]
pub(crate) struct SetAside {
    until: Mutex<HashMap<JobId, Instant>>,
}

impl SetAside {
    fn with_rows<T>(&self, action: impl FnOnce(&mut HashMap<JobId, Instant>) -> T) -> T {
        let mut until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        action(&mut until)
    }

    /// Sets job `id` aside from `now` for [`SET_ASIDE_FOR`].
    fn insert(&self, id: JobId, now: Instant) {
        self.with_rows(|until| until.insert(id, now + SET_ASIDE_FOR));
    }

    /// The jobs still set aside at `now`; forgets the others.
    fn ids(&self, now: Instant) -> Vec<JobId> {
        self.with_rows(|until| {
            until.retain(|_, until| *until > now);
            until.keys().copied().collect()
        })
    }
}

/// Returns every job whose lease expired to ready (or dead when out of attempts), in batches.
///
/// When the database refuses a batch for what it says (one row breaks a constraint or a trigger
/// of the application's), the expired jobs are rescued one at a time instead: each row refused on
/// its own is set aside (an error logged, [`RESCUES_REFUSED_TOTAL`] counted, left out of this
/// worker's sweeps for [`SET_ASIDE_FOR`]), and every other job is rescued.
///
/// [`RESCUES_REFUSED_TOTAL`]: crate::metrics::RESCUES_REFUSED_TOTAL
pub(crate) async fn rescue_once(shared: &Shared) -> Result<Vec<RescuedJob>, sqlx::Error> {
    let limit = shared.config.rescue_batch;
    let mut all = Vec::new();
    loop {
        let mut unreachable = None;
        let set_aside = shared.rescue_set_aside.ids(Instant::now());
        let (batch, full) = match store::rescue_expired(&shared.pool, limit, &set_aside).await {
            Ok(batch) => {
                let full = batch.len() == limit;
                (batch, full)
            }
            Err(error) if refusal::is_refusal(&error) => {
                tracing::warn!(%error, "the database refused a rescue of expired leases; rescuing them one by one");
                let expired = store::list_expired(&shared.pool, limit, &set_aside).await?;
                let listed = expired.len();
                let pass = rescue_one_by_one(shared, expired).await;
                unreachable = pass.unreachable;
                // Rows another rescue holds are skipped: stop rather than list them again.
                let full = listed == limit && pass.rescued.len() + pass.refused > 0;
                (pass.rescued, full && unreachable.is_none())
            }
            Err(error) => return Err(error),
        };
        for job in &batch {
            tracing::warn!(
                job.id,
                job.kind,
                job.queue,
                job.state,
                "lease expired; job rescued"
            );
            shared
                .metrics
                .job_rescued(&job.kind, &job.queue, &job.state);
        }
        all.extend(batch);
        if let Some(error) = unreachable {
            return Err(error);
        }
        if !full {
            return Ok(all);
        }
    }
}

/// What a row-by-row rescue did.
struct OneByOne {
    /// The jobs rescued.
    rescued: Vec<RescuedJob>,
    /// How many jobs were set aside.
    refused: usize,
    /// The error of reach that ended the pass early, if one did.
    unreachable: Option<sqlx::Error>,
}

/// Rescues `expired` one at a time; sets aside each job the database refuses to rescue. An
/// error of reach ends the pass.
async fn rescue_one_by_one(shared: &Shared, expired: Vec<ExpiredJob>) -> OneByOne {
    let unreachable: Mutex<Option<sqlx::Error>> = Mutex::new(None);
    let unreachable_ref = &unreachable;
    let done = refusal::one_by_one(expired, |jobs| async move {
        if unreachable_ref
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
        {
            return Ok(Vec::new());
        }
        let ids: Vec<JobId> = jobs.iter().map(|job| job.id).collect();
        match store::rescue_jobs(&shared.pool, &ids).await {
            Ok(rescued) => Ok(rescued),
            Err(error) if refusal::is_refusal(&error) => Err((jobs, error)),
            Err(error) => {
                *unreachable_ref
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(error);
                Ok(Vec::new())
            }
        }
    })
    .await;
    let now = Instant::now();
    let refused = done.refused.len();
    for (job, error) in done.refused {
        tracing::error!(
            job.id,
            job.kind,
            job.queue,
            %error,
            set_aside_for = ?SET_ASIDE_FOR,
            "lease expired, but the database refuses to rescue this job; it is set aside and the others are rescued: remove the cause the error names, or the job"
        );
        metrics::rescue_refused(&job.kind, &job.queue);
        shared.rescue_set_aside.insert(job.id, now);
    }
    OneByOne {
        rescued: done.written,
        refused,
        unreachable: unreachable
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_aside_job_comes_back_after_a_while() {
        let set_aside = SetAside::default();
        let now = Instant::now();
        set_aside.insert(7, now);
        assert_eq!(set_aside.ids(now), [7]);
        assert_eq!(set_aside.ids(now + SET_ASIDE_FOR / 2), [7]);
        assert!(set_aside.ids(now + SET_ASIDE_FOR).is_empty());
        assert!(set_aside.ids(now).is_empty(), "forgotten once expired");
    }
}
