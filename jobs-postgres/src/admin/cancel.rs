//! Cancelling jobs: [`cancel`] by id, [`cancel_by_dedupe_key`], [`cancel_matching`] by filter.
//!
//! A ready job, due or waiting for a later time (a retry backing off, a delayed job), is
//! cancelled at once: it becomes `cancelled`, no worker runs it, and retention deletes it with
//! the done jobs. A job being claimed while it is cancelled is either claimed first (then it is
//! running) or cancelled first (then it never runs): never both, never lost.
//!
//! A running job cannot be stopped from outside: it gets a request instead, which its run sees
//! at the worker's next heartbeat (`ctx.cancel_requested()`, `ctx.cancel_signal()`). If the run
//! then ends in any error, the job is `cancelled` instead of retried or dead; if it succeeds, it
//! is `done`. Should its worker die, the rescue cancels it instead of running it again.
//!
//! Jobs done, dead or cancelled already are left alone and reported. Who asked and why
//! ([`CancelNote`]) are kept on each job. Every operation is safe while workers run and safe to
//! repeat: the first request on a job is kept.

use std::time::Duration;

use jobs_core::{check_kind_name, check_queue_name, JobId};
use sqlx::PgPool;

use super::error::{check_note, refuse_nul};
use super::{AdminError, JobRef, JobState};
use crate::store::cancel::{self as store, Note, ReadySelection, SelectedRow};

/// Longest `by` or `reason` text recorded with a cancellation, in bytes.
pub const MAX_CANCEL_NOTE_LEN: usize = 1_000;

/// Jobs one statement of [`cancel_matching`] cancels.
pub const CANCEL_BATCH_SIZE: usize = 1_000;

/// Who asks for a cancellation and why, kept on every job cancelled or asked to stop.
///
/// ```
/// use jobs_postgres::admin::CancelNote;
///
/// let note = CancelNote::by("alice@ops").reason("campaign sent twice");
/// # let _ = note;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelNote {
    by: String,
    reason: Option<String>,
}

impl CancelNote {
    /// A cancellation asked for by `who` (free text: a person, a tool).
    pub fn by(who: impl Into<String>) -> Self {
        Self {
            by: who.into(),
            reason: None,
        }
    }

    /// Why, for the record.
    pub fn reason(mut self, why: impl Into<String>) -> Self {
        self.reason = Some(why.into());
        self
    }

    /// Refuses a text the database cannot store or longer than [`MAX_CANCEL_NOTE_LEN`].
    fn checked(&self) -> Result<Note<'_>, AdminError> {
        check_note("by", &self.by, MAX_CANCEL_NOTE_LEN)?;
        if let Some(reason) = &self.reason {
            check_note("reason", reason, MAX_CANCEL_NOTE_LEN)?;
        }
        Ok(Note {
            by: &self.by,
            reason: self.reason.as_deref(),
        })
    }
}

/// What a cancellation did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CancelReport {
    /// The ready jobs cancelled, by id: no worker will run them.
    pub cancelled: Vec<JobRef>,
    /// The running jobs asked to stop, by id (asked now, or earlier and still running): each
    /// ends `cancelled` unless its run succeeds.
    pub requested: Vec<JobRef>,
    /// The jobs selected that cannot be cancelled any more, by id: done, dead or cancelled
    /// already, or not found.
    pub not_cancellable: Vec<NotCancellable>,
}

impl CancelReport {
    /// Adds another batch's report to this one.
    pub fn merge(&mut self, other: CancelReport) {
        self.cancelled.extend(other.cancelled);
        self.requested.extend(other.requested);
        self.not_cancellable.extend(other.not_cancellable);
    }

    fn of(rows: Vec<SelectedRow>) -> Self {
        let mut report = Self::default();
        for row in rows {
            let state = JobState::try_from(row.state).ok();
            let job = JobRef {
                id: row.id,
                kind: row.kind,
                queue: row.queue,
            };
            match (row.changed, state) {
                (true, Some(JobState::Cancelled)) => report.cancelled.push(job),
                (true, _) => report.requested.push(job),
                (false, state) => report
                    .not_cancellable
                    .push(NotCancellable { id: job.id, state }),
            }
        }
        report
    }
}

/// A job a cancellation selected but could not cancel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotCancellable {
    /// Its id.
    pub id: JobId,
    /// Its state (done, dead or cancelled); `None` when there is no such job. As the
    /// cancellation read it: a job that ran to its end while the cancellation was being made
    /// shows the state it had then (ready or running).
    pub state: Option<JobState>,
}

/// Which ready jobs [`cancel_matching`] cancels: `jobs stats` READY (due now) or SCHEDULED
/// (waiting for a later time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadyState {
    /// Due now, waiting for a worker.
    Due,
    /// Waiting for a later `run_at`: a retry backing off, a delayed or snoozed job.
    Scheduled,
}

/// Which ready jobs [`cancel_matching`] cancels. Conditions add up; at least one is required,
/// or [`every_ready_job`](Self::every_ready_job), so that a filter left empty by mistake does
/// not cancel the whole queue. Running jobs are never selected by filter: cancel them by id.
///
/// ```
/// use std::time::Duration;
/// use jobs_postgres::admin::{CancelFilter, ReadyState};
///
/// let retries_of_a_kind = CancelFilter::new()
///     .kind("send_newsletter")
///     .state(ReadyState::Scheduled);
/// let stale = CancelFilter::new()
///     .queue("reports")
///     .enqueued_at_least(Duration::from_secs(3_600));
/// # let _ = (retries_of_a_kind, stale);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CancelFilter {
    kind: Option<String>,
    queue: Option<String>,
    state: Option<ReadyState>,
    min_age: Option<Duration>,
    everything: bool,
}

impl CancelFilter {
    /// No condition yet: refused as it is (see [`every_ready_job`](Self::every_ready_job)).
    pub fn new() -> Self {
        Self::default()
    }

    /// Every ready job of every queue, said explicitly.
    pub fn every_ready_job() -> Self {
        Self {
            everything: true,
            ..Self::default()
        }
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

    /// Only jobs due now, or only those waiting for a later time.
    pub fn state(mut self, state: ReadyState) -> Self {
        self.state = Some(state);
        self
    }

    /// Only jobs enqueued at least this long ago.
    pub fn enqueued_at_least(mut self, age: Duration) -> Self {
        self.min_age = Some(age);
        self
    }

    /// Whether no condition was given (and every ready job was not asked for either).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The selection as the store binds it, once the filter is checked: names valid, not empty.
    fn selection(&self) -> Result<ReadySelection<'_>, AdminError> {
        if self.is_empty() {
            return Err(AdminError::EmptyFilter);
        }
        if let Some(kind) = &self.kind {
            check_kind_name(kind).map_err(AdminError::InvalidKind)?;
        }
        if let Some(queue) = &self.queue {
            check_queue_name(queue)?;
        }
        Ok(ReadySelection {
            kind: self.kind.as_deref(),
            queue: self.queue.as_deref(),
            scheduled: self.state.map(|state| state == ReadyState::Scheduled),
            min_age_secs: self.min_age.map(|age| age.as_secs_f64()),
        })
    }
}

/// Cancels the jobs `ids`: the ready ones at once (no worker runs them), the running ones by a
/// request their run observes (`ctx.cancel_requested()`), ending cancelled unless the run
/// succeeds; the others are reported as not cancellable. `note` says who and why.
///
/// Refused before the database, with [`AdminError::InvalidText`], when a text of `note` holds
/// U+0000 or exceeds [`MAX_CANCEL_NOTE_LEN`] bytes.
pub async fn cancel(
    pool: &PgPool,
    ids: &[JobId],
    note: &CancelNote,
) -> Result<CancelReport, AdminError> {
    let checked = note.checked()?;
    let rows = store::cancel_jobs(pool, ids, checked).await?;
    let mut report = CancelReport::of(rows);
    let mut missing: Vec<JobId> = ids
        .iter()
        .copied()
        .filter(|id| {
            !report.cancelled.iter().any(|job| job.id == *id)
                && !report.requested.iter().any(|job| job.id == *id)
                && !report.not_cancellable.iter().any(|job| job.id == *id)
        })
        .collect();
    missing.sort_unstable();
    missing.dedup();
    report.not_cancellable.extend(
        missing
            .into_iter()
            .map(|id| NotCancellable { id, state: None }),
    );
    report.not_cancellable.sort_unstable_by_key(|job| job.id);
    log(&report, note);
    Ok(report)
}

/// Cancels the job of `kind` holding dedupe key `key` (ready: cancelled; running: asked to
/// stop), as [`cancel`] does by id. A `retained` key may be held by a finished job, which is
/// then reported as not cancellable; a key nobody holds gives an empty report.
///
/// Cancelling frees an `active` key at once (it is held only while the job is ready or
/// running): the same work can be enqueued again. A `retained` key stays held by the cancelled
/// job until retention deletes it.
///
/// Refused before the database when `kind` breaks the naming rules, `key` holds U+0000, or
/// `note` is refused as by [`cancel`].
pub async fn cancel_by_dedupe_key(
    pool: &PgPool,
    kind: &str,
    key: &str,
    note: &CancelNote,
) -> Result<CancelReport, AdminError> {
    check_kind_name(kind).map_err(AdminError::InvalidKind)?;
    refuse_nul("dedupe key", key)?;
    let checked = note.checked()?;
    let rows = store::cancel_by_dedupe_key(pool, kind, key, checked).await?;
    let report = CancelReport::of(rows);
    log(&report, note);
    Ok(report)
}

/// Cancels every ready job `filter` selects, [`CANCEL_BATCH_SIZE`] per statement until a
/// statement finds none left (a batch can come back short when workers claim some of its rows
/// meanwhile, so a short batch is not the end); running jobs are never selected by filter. Jobs that become ready meanwhile (enqueued,
/// retried) may be cancelled too: [`preview_cancel`] counts the selection as it is now.
///
/// Refused before the database with [`AdminError::EmptyFilter`] for a filter without a
/// condition, or when a name or `note` is refused.
pub async fn cancel_matching(
    pool: &PgPool,
    filter: &CancelFilter,
    note: &CancelNote,
) -> Result<CancelReport, AdminError> {
    let mut report = CancelReport::default();
    loop {
        let batch = cancel_matching_batch(pool, filter, note, CANCEL_BATCH_SIZE).await?;
        let none_left = batch.cancelled.is_empty();
        report.merge(batch);
        if none_left {
            return Ok(report);
        }
    }
}

/// Cancels up to `limit` ready jobs `filter` selects, in one statement, for callers that show
/// progress: call it again until it cancels none (the jobs cancelled leave the selection, so
/// each call takes the next ones; a call can cancel fewer than `limit` while more are left, when
/// workers claim some of the rows it would have taken). See [`cancel_matching`].
pub async fn cancel_matching_batch(
    pool: &PgPool,
    filter: &CancelFilter,
    note: &CancelNote,
    limit: usize,
) -> Result<CancelReport, AdminError> {
    let selection = filter.selection()?;
    let checked = note.checked()?;
    let rows = store::cancel_matching(pool, &selection, checked, limit.max(1)).await?;
    let mut cancelled: Vec<JobRef> = rows
        .into_iter()
        .map(|row| JobRef {
            id: row.id,
            kind: row.kind,
            queue: row.queue,
        })
        .collect();
    cancelled.sort_unstable_by_key(|job| job.id);
    let report = CancelReport {
        cancelled,
        ..CancelReport::default()
    };
    log(&report, note);
    Ok(report)
}

/// How many ready jobs [`cancel_matching`] would cancel now with `filter`, changing nothing.
/// Refused as [`cancel_matching`] is for an empty filter or a bad name.
pub async fn preview_cancel(pool: &PgPool, filter: &CancelFilter) -> Result<u64, AdminError> {
    let selection = filter.selection()?;
    let count = store::count_matching(pool, &selection).await?;
    Ok(count.unsigned_abs())
}

fn log(report: &CancelReport, note: &CancelNote) {
    if !report.cancelled.is_empty() || !report.requested.is_empty() {
        tracing::info!(
            cancelled = report.cancelled.len(),
            requested = report.requested.len(),
            by = %note.by,
            reason = note.reason.as_deref().unwrap_or(""),
            "jobs cancelled"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_filter_is_refused_unless_everything_is_asked_for() {
        assert!(matches!(
            CancelFilter::new().selection(),
            Err(AdminError::EmptyFilter)
        ));
        let everything = CancelFilter::every_ready_job();
        let selection = everything.selection().unwrap();
        assert_eq!(
            (selection.kind, selection.queue, selection.scheduled),
            (None, None, None)
        );
        let scheduled = CancelFilter::new().state(ReadyState::Scheduled);
        assert_eq!(scheduled.selection().unwrap().scheduled, Some(true));
        assert!(matches!(
            CancelFilter::new().kind("bad kind").selection(),
            Err(AdminError::InvalidKind(_))
        ));
        assert!(matches!(
            CancelFilter::new().queue("").selection(),
            Err(AdminError::InvalidQueue(_))
        ));
    }

    #[test]
    fn notes_are_checked() {
        assert!(CancelNote::by("ops").reason("why").checked().is_ok());
        let long = "x".repeat(MAX_CANCEL_NOTE_LEN + 1);
        assert!(matches!(
            CancelNote::by(long).checked(),
            Err(AdminError::InvalidText { field: "by", .. })
        ));
        assert!(matches!(
            CancelNote::by("ops").reason("a\0b").checked(),
            Err(AdminError::InvalidText {
                field: "reason",
                ..
            })
        ));
    }
}
