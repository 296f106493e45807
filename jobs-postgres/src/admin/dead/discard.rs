//! Deleting dead jobs: [`discard`] and [`discard_batch`].

use jobs_core::JobId;
use sqlx::PgPool;

use super::{every_batch, preview, resume_after, Batch, DeadFilter, JobRef, BATCH_SIZE};
use crate::admin::AdminError;
use crate::store::dead as store;

/// What a discard did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscardReport {
    /// The dead jobs deleted, by id.
    pub discarded: Vec<JobRef>,
}

impl DiscardReport {
    /// Adds another batch's report to this one.
    pub fn merge(&mut self, other: DiscardReport) {
        self.discarded.extend(other.discarded);
    }
}

/// Deletes every dead job `filter` selects, with its history; jobs in any other state are
/// never touched. Works in batches of [`BATCH_SIZE`]; safe while workers run and to repeat.
///
/// Deleting a job also frees its `retained` dedupe key: the same work can be enqueued again.
pub async fn discard(pool: &PgPool, filter: &DeadFilter) -> Result<DiscardReport, AdminError> {
    every_batch(|after| discard_batch(pool, filter, after, BATCH_SIZE)).await
}

/// Deletes up to `limit` dead jobs `filter` selects with an id above `after` (0 to start), in
/// one statement: see [`discard`].
pub async fn discard_batch(
    pool: &PgPool,
    filter: &DeadFilter,
    after: JobId,
    limit: usize,
) -> Result<Batch<DiscardReport>, AdminError> {
    let mut discarded =
        store::batch(pool, store::DISCARD, &filter.selection(), after, limit).await?;
    discarded.sort_unstable_by_key(|job| job.id);
    let last = discarded.last().map(|job| job.id);
    let resume_after = resume_after(discarded.len(), limit, last);
    if !discarded.is_empty() {
        tracing::info!(discarded = discarded.len(), "dead jobs discarded");
    }
    Ok(Batch {
        report: DiscardReport { discarded },
        resume_after,
    })
}

/// What [`discard`] would delete now with `filter`, changing nothing: the dead jobs it selects, by
/// id, read in batches of [`BATCH_SIZE`] without locking anything.
pub async fn preview_discard(
    pool: &PgPool,
    filter: &DeadFilter,
) -> Result<DiscardReport, AdminError> {
    preview(pool, filter, store::PREVIEW_DISCARD, |discarded| {
        DiscardReport { discarded }
    })
    .await
}
