//! Dead letters: list and inspect dead jobs, replay them, discard them.
//!
//! A job is dead when it ran out of attempts, failed permanently or could not be decoded. It
//! keeps every attempt's error and stays until an operator acts: fix the cause, then
//! [`replay`] (the job runs again from attempt 1, its history kept), or [`discard`] it.
//!
//! Every operation selects dead jobs with a [`DeadFilter`] (by id, kind, queue and how long
//! they have been dead), touches only jobs that are dead when it runs, and is safe while
//! workers run: replaying a job already replayed, or discarding one already gone, does nothing.
//! Large selections are worked through in batches of [`BATCH_SIZE`], by id; the `_batch`
//! functions do one batch, for callers that show progress.

mod discard;
mod inspect;
mod replay;

use std::future::Future;
use std::time::Duration;

use jobs_core::JobId;
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgRow;
use sqlx::{FromRow, PgPool};

use crate::admin::AdminError;
use crate::store::dead::{self as store, DeadBatch, DeadSelection, HasJobId};

pub use discard::{discard, discard_batch, preview_discard, DiscardReport};
pub use inspect::{
    count_dead, job_details, list_dead, DeadJob, JobDetails, JobState, UnknownState,
};
pub use replay::{preview_replay, replay, replay_batch, ReplayReport, SkippedReplay};

/// Dead jobs one statement of [`replay`] or [`discard`] handles.
pub const BATCH_SIZE: usize = 1_000;

/// Which dead jobs an operation applies to. Conditions add up: `all().kind("a").queue("b")`
/// selects the dead jobs of kind `a` in queue `b`.
///
/// ```
/// use std::time::Duration;
/// use jobs_postgres::admin::DeadFilter;
///
/// let everything = DeadFilter::all();
/// let two = DeadFilter::all().ids([41, 42]);
/// let old_receipts = DeadFilter::all()
///     .kind("send_receipt")
///     .dead_for_at_least(Duration::from_secs(30 * 86_400));
/// # let _ = (everything, two, old_receipts);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeadFilter {
    ids: Option<Vec<JobId>>,
    kind: Option<String>,
    queue: Option<String>,
    dead_for_at_least: Option<Duration>,
}

impl DeadFilter {
    /// Every dead job.
    pub fn all() -> Self {
        Self::default()
    }

    /// Only the jobs with these ids.
    pub fn ids(mut self, ids: impl IntoIterator<Item = JobId>) -> Self {
        self.ids = Some(ids.into_iter().collect());
        self
    }

    /// Only jobs of this kind.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Only jobs of this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Only jobs dead for at least this long (since their last attempt ended).
    pub fn dead_for_at_least(mut self, age: Duration) -> Self {
        self.dead_for_at_least = Some(age);
        self
    }

    /// The ids asked for, when the filter names ids.
    pub fn requested_ids(&self) -> Option<&[JobId]> {
        self.ids.as_deref()
    }

    /// Whether the filter selects every dead job.
    pub fn is_all(&self) -> bool {
        *self == Self::default()
    }
}

impl DeadFilter {
    /// The selection as the store binds it.
    pub(crate) fn selection(&self) -> DeadSelection<'_> {
        DeadSelection {
            ids: self.requested_ids(),
            kind: self.kind_name(),
            queue: self.queue_name(),
            min_dead_secs: self.min_dead_secs(),
        }
    }

    fn kind_name(&self) -> Option<&str> {
        self.kind.as_deref()
    }

    fn queue_name(&self) -> Option<&str> {
        self.queue.as_deref()
    }

    fn min_dead_secs(&self) -> Option<f64> {
        self.dead_for_at_least.map(|age| age.as_secs_f64())
    }
}

/// A job an operation touched.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct JobRef {
    /// Its id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
}

/// One failed attempt, as kept in a job's error history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// Which attempt failed, from 1.
    pub attempt: i64,
    /// When, as PostgreSQL wrote it (RFC 3339).
    pub at: String,
    /// How it failed: `transient`, `retry_after`, `permanent`, `panic`, `timeout`,
    /// `undecodable`, `lease_expired` or `cancelled`.
    pub kind: String,
    /// The error message.
    pub error: String,
}

/// What one batch did, and where the next one starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch<T> {
    /// What this batch did.
    pub report: T,
    /// Pass it as `after` to the next batch; `None` when the selection is exhausted.
    pub resume_after: Option<JobId>,
}

/// The cursor after a batch of `selected` rows whose highest id is `last`.
fn resume_after(selected: usize, limit: usize, last: Option<JobId>) -> Option<JobId> {
    if selected < limit {
        None
    } else {
        last
    }
}

/// A report that batches add up to.
trait BatchReport: Default {
    /// Adds another batch's report to this one.
    fn absorb(&mut self, other: Self);
}

impl BatchReport for DiscardReport {
    fn absorb(&mut self, other: Self) {
        self.merge(other);
    }
}

impl BatchReport for ReplayReport {
    fn absorb(&mut self, other: Self) {
        self.merge(other);
    }
}

/// What a read-only `statement` (a preview) selects with `filter`, read in batches of
/// [`BATCH_SIZE`] by id without locking anything, as the report `report` makes of its rows.
async fn preview<Row, R>(
    pool: &PgPool,
    filter: &DeadFilter,
    statement: DeadBatch<Row>,
    report: fn(Vec<Row>) -> R,
) -> Result<R, AdminError>
where
    Row: for<'r> FromRow<'r, PgRow> + Send + Unpin + HasJobId,
    R: BatchReport,
{
    every_batch(|after| async move {
        let rows = store::batch(pool, statement, &filter.selection(), after, BATCH_SIZE).await?;
        let last = rows.last().map(HasJobId::job_id);
        Ok(Batch {
            resume_after: resume_after(rows.len(), BATCH_SIZE, last),
            report: report(rows),
        })
    })
    .await
}

/// Runs `one_batch` from the first dead job (`after` = 0) until the selection is exhausted, and
/// returns the batches' reports added up.
async fn every_batch<R, F, Fut>(mut one_batch: F) -> Result<R, AdminError>
where
    R: BatchReport,
    F: FnMut(JobId) -> Fut,
    Fut: Future<Output = Result<Batch<R>, AdminError>>,
{
    let mut report = R::default();
    let mut after = 0;
    loop {
        let batch = one_batch(after).await?;
        report.absorb(batch.report);
        match batch.resume_after {
            Some(next) => after = next,
            None => return Ok(report),
        }
    }
}
