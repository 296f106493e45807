//! Running a waiting job now: [`run_now`].

use jobs_core::JobId;
use sqlx::PgPool;

use super::{AdminError, JobRef};
use crate::store::waiting as store;

/// What [`run_now`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunNowReport {
    /// The jobs made due now, by id: their queues were announced, so idle workers claim them at
    /// once (unless the queue is paused).
    pub made_due: Vec<JobRef>,
    /// The ids asked for that were not waiting for a later time: due already, running,
    /// finished, dead, or not found. Nothing was changed for them.
    pub not_waiting: Vec<JobId>,
}

/// Makes the jobs `ids` due now when they wait for a later time: a retry backing off, a
/// delayed or snoozed job. Their attempts and error history stay as they are, so a retry run
/// now is the same attempt it would have been. Safe while workers run and safe to repeat.
pub async fn run_now(pool: &PgPool, ids: &[JobId]) -> Result<RunNowReport, AdminError> {
    let rows = store::run_now(pool, ids).await?;
    let made_due: Vec<JobRef> = rows
        .into_iter()
        .map(|row| JobRef {
            id: row.id,
            kind: row.kind,
            queue: row.queue,
        })
        .collect();
    let mut not_waiting: Vec<JobId> = ids
        .iter()
        .copied()
        .filter(|id| !made_due.iter().any(|job| job.id == *id))
        .collect();
    not_waiting.sort_unstable();
    not_waiting.dedup();
    if !made_due.is_empty() {
        tracing::info!(jobs = made_due.len(), "waiting jobs made due now");
    }
    Ok(RunNowReport {
        made_due,
        not_waiting,
    })
}
