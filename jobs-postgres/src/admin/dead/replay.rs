//! Replaying dead jobs: [`replay`] and [`replay_batch`].

use jobs_core::JobId;
use sqlx::PgPool;

use super::{every_batch, preview, resume_after, Batch, DeadFilter, JobRef, BATCH_SIZE};
use crate::admin::AdminError;
use crate::store::dead::{self as store, CandidateRow};

/// How often a batch is tried again after another transaction took a dedupe key meanwhile.
const UNIQUE_VIOLATION_RETRIES: usize = 3;

/// A dead job left dead because another job holds its dedupe key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedReplay {
    /// The job left dead.
    pub job: JobRef,
    /// Its dedupe key (scope `active`).
    pub dedupe_key: String,
    /// The job holding the key: ready or running, or replayed just before in the same call.
    pub held_by: JobId,
}

/// What a replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Jobs made ready again, by id.
    pub replayed: Vec<JobRef>,
    /// Jobs left dead, by id, because their `active` dedupe key is held by another job: making
    /// them ready would run the same work twice at once. Replay them once the holder is done.
    pub skipped: Vec<SkippedReplay>,
}

impl ReplayReport {
    /// Adds another batch's report to this one.
    pub fn merge(&mut self, other: ReplayReport) {
        self.replayed.extend(other.replayed);
        self.skipped.extend(other.skipped);
    }

    /// The ids `filter` names that this replay neither replayed nor skipped: jobs that were not
    /// dead (already replayed, say) or do not exist.
    pub fn not_dead(&self, filter: &DeadFilter) -> Vec<JobId> {
        let Some(ids) = filter.requested_ids() else {
            return Vec::new();
        };
        let mut missing: Vec<JobId> = ids
            .iter()
            .copied()
            .filter(|id| {
                !self.replayed.iter().any(|job| job.id == *id)
                    && !self.skipped.iter().any(|skipped| skipped.job.id == *id)
            })
            .collect();
        missing.sort_unstable();
        missing.dedup();
        missing
    }
}

impl ReplayReport {
    /// The report of the candidates a replay statement returned, held ones skipped.
    fn from_candidates(rows: Vec<CandidateRow>) -> Self {
        let mut report = ReplayReport::default();
        for row in rows {
            let job = JobRef {
                id: row.id,
                kind: row.kind,
                queue: row.queue,
            };
            match row.held_by {
                None => report.replayed.push(job),
                Some(held_by) => report.skipped.push(SkippedReplay {
                    job,
                    dedupe_key: row.dedupe_key.unwrap_or_default(),
                    held_by,
                }),
            }
        }
        report
    }
}

/// Replays every dead job `filter` selects: each becomes ready at once, attempts reset to 0,
/// error history kept, and its queue is notified so idle workers pick it up.
///
/// Works in batches of [`BATCH_SIZE`]; safe while workers run and safe to repeat (a job no
/// longer dead is left alone). A job whose `active` dedupe key another job holds is skipped and
/// reported (see [`ReplayReport::skipped`]).
pub async fn replay(pool: &PgPool, filter: &DeadFilter) -> Result<ReplayReport, AdminError> {
    every_batch(|after| replay_batch(pool, filter, after, BATCH_SIZE)).await
}

/// Replays up to `limit` dead jobs `filter` selects with an id above `after` (0 to start), in
/// one statement: see [`replay`].
pub async fn replay_batch(
    pool: &PgPool,
    filter: &DeadFilter,
    after: JobId,
    limit: usize,
) -> Result<Batch<ReplayReport>, AdminError> {
    let mut tries = 0;
    let rows: Vec<CandidateRow> = loop {
        tries += 1;
        let result: Result<Vec<CandidateRow>, AdminError> =
            store::batch(pool, store::REPLAY, &filter.selection(), after, limit)
                .await
                .map_err(AdminError::from);
        match result {
            // A job with the same active key was enqueued between the check and the update:
            // the statement rolled back; the next try sees the holder and skips the job.
            Err(error) if error.is_unique_violation() && tries < UNIQUE_VIOLATION_RETRIES => {
                tracing::debug!(%error, "dedupe key taken during replay; trying the batch again");
            }
            other => break other?,
        }
    };
    let selected = rows.len();
    let last = rows.last().map(|row| row.id);
    let report = ReplayReport::from_candidates(rows);
    if !report.replayed.is_empty() || !report.skipped.is_empty() {
        tracing::info!(
            replayed = report.replayed.len(),
            skipped = report.skipped.len(),
            "dead jobs replayed"
        );
    }
    Ok(Batch {
        report,
        resume_after: resume_after(selected, limit, last),
    })
}

/// What [`replay`] would do now with `filter`, changing nothing: the jobs it would make ready and
/// those it would skip because another job holds their `active` dedupe key (a ready or running
/// job, or the first of the selection with the same key, which the replay makes ready first).
/// Read in batches of [`BATCH_SIZE`], by id, without locking anything: jobs that die, or are
/// replayed, between this preview and a replay make the two differ.
pub async fn preview_replay(
    pool: &PgPool,
    filter: &DeadFilter,
) -> Result<ReplayReport, AdminError> {
    preview(
        pool,
        filter,
        store::PREVIEW_REPLAY,
        ReplayReport::from_candidates,
    )
    .await
}
