//! Batches: fan-out, fan-in. Many jobs enqueued as one batch, with a callback job that runs once
//! every member has ended, and sees how many ended done, dead or cancelled, and which failed.
//!
//! ```ignore
//! use jobs::Batch;
//!
//! let mut tx = pool.begin().await?;
//! let resizes = photos.iter().map(|photo| resize::builder(album_id, photo.id));
//! let batch = Batch::new()
//!     .then(build_album::builder(album_id))
//!     .enqueue_in(&mut tx, resizes)
//!     .await?;
//! tx.commit().await?;
//!
//! #[job]
//! async fn build_album(ctx: JobContext, album_id: i64) -> JobResult {
//!     let outcome = Batch::outcome(&ctx).await?; // the batch this job is the callback of
//!     if outcome.dead > 0 { /* some photos failed: outcome.failed names them */ }
//!     Ok(())
//! }
//! ```
//!
//! - **Sealed by its creator's commit.** The batch and its first members are written together
//!   in the caller's transaction (or in a transaction of their own with
//!   [`Batch::enqueue`]). After that, only the batch's own members add to it, while they run
//!   ([`Batch::add_in`], fenced by the member's lease): a chunked import that discovers more
//!   chunks adds them before it ends. Since a running member keeps the batch open, the batch
//!   cannot end while an addition is still possible, and no explicit seal is needed.
//! - **Exactly once.** The callback waits (state `waiting`, never claimed) and becomes ready in
//!   the transaction that ends the last member, whichever path ends it: an outcome, a rescue to
//!   dead, an operator's cancel. Members are counted per chunk of 64 ids rather than on one row,
//!   so workers ending members at once do not queue on a single counter.
//! - **Replay.** Replaying a dead member re-opens the batch: a callback that has not started
//!   waits again, and one that already ran runs again when the batch ends again, with the new
//!   counts.
//! - A member whose dedupe key is already held is not added (its result says `Duplicate`), and
//!   the batch does not wait for the job holding the key.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use jobs_core::{EncodeError, JobContext, JobId, NewJob};
use sqlx::{Acquire, PgConnection, PgPool};

use crate::enqueue::{enqueue_job, insert_checked, EnqueueBuilder, EnqueueError, Enqueued};
use crate::store::batches::{self, BatchOf};
use crate::transaction::RunLink;

/// The identity of a batch.
pub type BatchId = i64;

/// Why a batch could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// A member or the callback could not be enqueued (refused input, or the database).
    #[error(transparent)]
    Enqueue(#[from] EnqueueError),
    /// The callback's dedupe key is held by another job: a callback must be a new job.
    #[error("the batch's callback (kind `{kind}`) is a duplicate of job {existing}: a callback must be a new job, so nothing was written")]
    CallbackDuplicate {
        /// The callback's kind.
        kind: &'static str,
        /// The job holding its dedupe key.
        existing: JobId,
    },
    /// A member or the callback was given prerequisites (`after`): batch jobs start when
    /// enqueued (members) or when the batch ends (callback), not after other jobs.
    #[error("a batch's member or callback (kind `{kind}`) cannot run after other jobs: enqueue it outside the batch, or make the batch's callback depend on nothing")]
    HasPrerequisites {
        /// The job's kind.
        kind: &'static str,
    },
    /// The job adding members is not in a batch.
    #[error("job {job} is not a member of a batch: only a batch's members may add to it")]
    NotAMember {
        /// The job.
        job: JobId,
    },
    /// The job adding members (or asking for its batch's outcome) no longer holds its lease:
    /// another worker or a rescue took it. Nothing was added.
    #[error("job {job} lost its lease: another worker or a rescue took it; nothing was added")]
    LeaseLost {
        /// The job.
        job: JobId,
    },
    /// The context does not come from a worker (a unit test's context, say).
    #[error("this job context does not come from a jobs worker")]
    NoWorker,
    /// The job asking for its batch's outcome is not a batch's callback.
    #[error("job {job} is not the callback of a batch")]
    NotACallback {
        /// The job.
        job: JobId,
    },
    /// No batch has this id (never created, or removed by retention).
    #[error("no batch {batch}")]
    NoSuchBatch {
        /// The batch.
        batch: BatchId,
    },
    /// The database failed.
    #[error("batch statement failed: {0}")]
    Database(#[from] sqlx::Error),
}

/// A batch about to be enqueued: its callback, if any. See the [module](self) documentation.
#[derive(Debug, Default)]
#[must_use = "a batch does nothing until `.enqueue_in(..)` or `.enqueue(..)` is awaited"]
pub struct Batch {
    callback: Option<Result<NewJob, EncodeError>>,
}

/// What [`Batch::enqueue_in`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueuedBatch {
    /// The batch's id.
    pub id: BatchId,
    /// The callback job, when the batch has one.
    pub callback: Option<JobId>,
    /// One result per member, in input order: `New` for members, `Duplicate` for jobs whose
    /// dedupe key was held (not members).
    pub members: Vec<Enqueued>,
}

/// How a batch stands: its members' counts, and which ended dead or cancelled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOutcome {
    /// The batch's id.
    pub id: BatchId,
    /// Its callback job, if any.
    pub callback: Option<JobId>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When its last member ended; `None` while any is pending.
    pub ended_at: Option<DateTime<Utc>>,
    /// Members not ended yet.
    pub pending: u64,
    /// Members that ended done.
    pub done: u64,
    /// Members that ended dead.
    pub dead: u64,
    /// Members that ended cancelled.
    pub cancelled: u64,
    /// The members that ended dead or cancelled, by id, with their state.
    pub failed: Vec<(JobId, String)>,
}

impl BatchOutcome {
    /// Members in all.
    pub fn members(&self) -> u64 {
        self.pending + self.done + self.dead + self.cancelled
    }
}

impl Batch {
    /// A batch without a callback (its end is still recorded and readable).
    pub fn new() -> Self {
        Self::default()
    }

    /// The job to run once every member has ended, exactly once.
    pub fn then(mut self, callback: EnqueueBuilder) -> Self {
        self.callback = Some(callback.into_new_job());
        self
    }

    /// Enqueues the batch with its first `members` on the caller's connection or transaction:
    /// they exist exactly when that transaction commits. On a connection outside a transaction,
    /// the batch is written in a transaction of its own. Every job is checked first: a refused
    /// one writes nothing, and leaves the caller's transaction usable (as does any error here:
    /// the batch is written under a savepoint).
    pub async fn enqueue_in(
        self,
        conn: &mut PgConnection,
        members: impl IntoIterator<Item = EnqueueBuilder>,
    ) -> Result<EnqueuedBatch, BatchError> {
        let callback = self.callback.transpose().map_err(EnqueueError::from)?;
        let members = checked_members(members)?;
        if let Some(callback) = &callback {
            callback.check().map_err(EnqueueError::from)?;
            refuse_prerequisites(callback)?;
        }
        let mut tx = conn.begin().await?;
        let callback_id = match &callback {
            None => None,
            Some(callback) => match enqueue_job(&mut tx, callback).await? {
                Enqueued::New(id) => Some(id),
                Enqueued::Duplicate(existing) => {
                    return Err(BatchError::CallbackDuplicate {
                        kind: callback.kind,
                        existing,
                    })
                }
            },
        };
        let id = batches::create_batch(&mut tx, callback_id).await?;
        let results = insert_checked(&mut tx, &members, Some(id)).await?;
        batches::open_batch(&mut tx, id, &new_ids(&results)).await?;
        tx.commit().await?;
        Ok(EnqueuedBatch {
            id,
            callback: callback_id,
            members: results,
        })
    }

    /// Enqueues the batch with its first `members` in a transaction of its own.
    pub async fn enqueue(
        self,
        pool: &PgPool,
        members: impl IntoIterator<Item = EnqueueBuilder>,
    ) -> Result<EnqueuedBatch, BatchError> {
        let mut conn = pool.acquire().await?;
        self.enqueue_in(&mut conn, members).await
    }

    /// Adds `members` to the batch of the running job `ctx`, on the caller's connection or
    /// transaction (in the job's own transaction, they are added exactly when it completes).
    /// The job's lease is checked and its outcome held back until the addition commits, so the
    /// batch cannot end in between; a job that lost its lease adds nothing
    /// ([`BatchError::LeaseLost`]).
    pub async fn add_in(
        ctx: &JobContext,
        conn: &mut PgConnection,
        members: impl IntoIterator<Item = EnqueueBuilder>,
    ) -> Result<Vec<Enqueued>, BatchError> {
        let run = ctx.backend::<RunLink>().ok_or(BatchError::NoWorker)?;
        let members = checked_members(members)?;
        let mut tx = conn.begin().await?;
        let batch = match batches::lock_running_member(&mut tx, run.id(), run.token()).await? {
            None => return Err(BatchError::LeaseLost { job: run.id() }),
            Some(None) => return Err(BatchError::NotAMember { job: run.id() }),
            Some(Some(batch)) => batch,
        };
        let results = insert_checked(&mut tx, &members, Some(batch)).await?;
        batches::add_to_chunks(&mut tx, batch, &new_ids(&results)).await?;
        tx.commit().await?;
        Ok(results)
    }

    /// The outcome of the batch whose callback is the running job `ctx`: what a callback reads
    /// to see how its batch ended.
    pub async fn outcome(ctx: &JobContext) -> Result<BatchOutcome, BatchError> {
        let run = ctx.backend::<RunLink>().ok_or(BatchError::NoWorker)?;
        batch_outcome(run.pool(), BatchOf::Callback(run.id()))
            .await?
            .ok_or(BatchError::NotACallback { job: run.id() })
    }
}

/// The outcome of batch `id`, for operators and tests.
pub async fn batch_outcome_by_id(pool: &PgPool, id: BatchId) -> Result<BatchOutcome, BatchError> {
    batch_outcome(pool, BatchOf::Id(id))
        .await?
        .ok_or(BatchError::NoSuchBatch { batch: id })
}

pub(crate) async fn batch_outcome(
    pool: &PgPool,
    which: BatchOf,
) -> Result<Option<BatchOutcome>, BatchError> {
    let Some(counts) = batches::batch_counts(pool, which).await? else {
        return Ok(None);
    };
    let failed = if counts.dead + counts.cancelled > 0 {
        batches::failed_members(pool, counts.id).await?
    } else {
        Vec::new()
    };
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(Some(BatchOutcome {
        id: counts.id,
        callback: counts.callback_id,
        created_at: counts.created_at,
        ended_at: counts.ended_at,
        pending: count(counts.pending),
        done: count(counts.done),
        dead: count(counts.dead),
        cancelled: count(counts.cancelled),
        failed,
    }))
}

/// The members, checked, none with prerequisites.
fn checked_members(
    members: impl IntoIterator<Item = EnqueueBuilder>,
) -> Result<Vec<NewJob>, BatchError> {
    let members = members
        .into_iter()
        .map(EnqueueBuilder::into_new_job)
        .collect::<Result<Vec<_>, _>>()
        .map_err(EnqueueError::from)?;
    for member in &members {
        member.check().map_err(EnqueueError::from)?;
        refuse_prerequisites(member)?;
    }
    Ok(members)
}

fn refuse_prerequisites(job: &NewJob) -> Result<(), BatchError> {
    if job.after.is_empty() {
        Ok(())
    } else {
        Err(BatchError::HasPrerequisites { kind: job.kind })
    }
}

/// The ids of the jobs written (not the duplicates), each once.
fn new_ids(results: &[Enqueued]) -> Vec<JobId> {
    let mut seen = HashSet::new();
    results
        .iter()
        .filter_map(|result| match result {
            Enqueued::New(id) if seen.insert(*id) => Some(*id),
            _ => None,
        })
        .collect()
}
