//! Finding jobs: [`find_jobs`] pages through the jobs a [`JobFilter`] selects, newest first.
//!
//! A page is read by keyset: it starts below the id of a [`Cursor`] (the first page at the
//! newest job), so that paging stays as fast on the last page as on the first, and a job
//! enqueued meanwhile never shifts a later page (it is newer than every cursor handed out). Each
//! job is on at most one page of a walk.
//!
//! **What a page costs.** A page reads its candidates through an index, newest first, and
//! examines at most [`MAX_EXAMINED`] of them, however many jobs the table retains:
//!
//! - by id: one probe of the primary key;
//! - by kind and dedupe key: the key's digest in the dedupe indexes (dedupe keys are unique per
//!   kind, so a key is searched with its kind);
//! - by kind, with or without a status: the kind's jobs in the partial index of each state
//!   asked for, by id (done and cancelled ones through an index of their own), at most
//!   [`MAX_EXAMINED`] entries of each, then the rows the page shows;
//! - by a live status (`waiting`, `ready`, `scheduled`, `running`, `dead`), with or without a kind: that
//!   state's partial index, read whole and sorted by id, then the rows the page shows; its cost
//!   follows the live jobs of that state (a backlog of 300,000 ready jobs takes a few hundred
//!   milliseconds a page), as the claims' and [`stats`](super::stats) do, never the retained
//!   ones;
//! - anything else (nothing, a queue, `done` or `cancelled`, time ranges, error text, without a
//!   kind): the newest jobs through the primary key.
//!
//! The other conditions (queue, time ranges, error text) are checked on those candidates. A
//! page that examined [`MAX_EXAMINED`] candidates before it found enough matches ends there,
//! short or even empty, with [`JobPage::examination_bounded`] set and a cursor to go on from:
//! searching a rare queue or an old time range without a kind takes several pages, each of
//! bounded cost, rather than one that reads the whole table. Give the kind to find rare jobs in
//! one page.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, Utc};
use jobs_core::{check_kind_name, check_queue_name, JobId};
use sqlx::types::Json;
use sqlx::PgPool;

use super::error::refuse_nul;
use super::{AdminError, AttemptRecord};
use crate::store::find::{self as store, FoundRow, Search};

/// Jobs a page holds unless asked otherwise.
pub const DEFAULT_PAGE_SIZE: usize = 50;
/// Most jobs a page may hold.
pub const MAX_PAGE_SIZE: usize = 500;
/// Most candidate jobs a page examines (see the [module](self) on what a page costs).
pub const MAX_EXAMINED: usize = 10_000;
/// Longest error text searched for, in bytes.
pub const MAX_ERROR_TEXT_LEN: usize = 1_000;

/// A job's status as an operator sees it: its state, with ready jobs split into those due now
/// and those waiting for a later time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobStatus {
    /// Waiting for other jobs to end (its prerequisites, or the members of its batch).
    Waiting,
    /// Due, waiting for a worker.
    Ready,
    /// Ready but waiting for its later `run_at`: a retry backing off, a delayed job.
    Scheduled,
    /// Held by a worker.
    Running,
    /// Succeeded; kept for the retention period.
    Done,
    /// Failed for good; kept until replayed or discarded.
    Dead,
    /// Cancelled; kept for the retention period.
    Cancelled,
}

impl JobStatus {
    /// Every status, in a job's life order.
    pub const ALL: [JobStatus; 7] = [
        JobStatus::Waiting,
        JobStatus::Ready,
        JobStatus::Scheduled,
        JobStatus::Running,
        JobStatus::Done,
        JobStatus::Dead,
        JobStatus::Cancelled,
    ];

    /// Its name: `waiting`, `ready`, `scheduled`, `running`, `done`, `dead` or `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Waiting => "waiting",
            JobStatus::Ready => "ready",
            JobStatus::Scheduled => "scheduled",
            JobStatus::Running => "running",
            JobStatus::Done => "done",
            JobStatus::Dead => "dead",
            JobStatus::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name [`JobStatus::from_str`] does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown job status `{0}`: expected one of waiting, ready, scheduled, running, done, dead, cancelled"
)]
pub struct UnknownStatus(String);

impl FromStr for JobStatus {
    type Err = UnknownStatus;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        JobStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == text)
            .ok_or_else(|| UnknownStatus(text.to_owned()))
    }
}

/// Which jobs a search selects. Conditions add up: `all().kind("a").status(Dead)` selects the
/// dead jobs of kind `a`. Checked by [`find_jobs`] before anything is sent to the database.
///
/// ```
/// use chrono::{Duration, Utc};
/// use jobs_postgres::admin::{JobFilter, JobStatus};
///
/// let everything = JobFilter::all();
/// let failing_receipts = JobFilter::all()
///     .kind("send_receipt")
///     .status(JobStatus::Dead)
///     .error_text("timed out");
/// let one_order = JobFilter::all().kind("send_receipt").dedupe_key("order:42");
/// let last_hour = JobFilter::all().created_since(Utc::now() - Duration::hours(1));
/// # let _ = (everything, failing_receipts, one_order, last_hour);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    id: Option<JobId>,
    kind: Option<String>,
    queue: Option<String>,
    status: Option<JobStatus>,
    dedupe_key: Option<String>,
    created_since: Option<DateTime<Utc>>,
    created_until: Option<DateTime<Utc>>,
    finished_since: Option<DateTime<Utc>>,
    finished_until: Option<DateTime<Utc>>,
    error_text: Option<String>,
}

impl JobFilter {
    /// Every job.
    pub fn all() -> Self {
        Self::default()
    }

    /// Only the job with this id.
    pub fn id(mut self, id: JobId) -> Self {
        self.id = Some(id);
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

    /// Only jobs in this status.
    pub fn status(mut self, status: JobStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Only jobs holding this dedupe key (in either scope). Needs [`kind`](Self::kind): keys
    /// are unique per kind.
    pub fn dedupe_key(mut self, key: impl Into<String>) -> Self {
        self.dedupe_key = Some(key.into());
        self
    }

    /// Only jobs enqueued at or after `at`.
    pub fn created_since(mut self, at: DateTime<Utc>) -> Self {
        self.created_since = Some(at);
        self
    }

    /// Only jobs enqueued before `at`.
    pub fn created_until(mut self, at: DateTime<Utc>) -> Self {
        self.created_until = Some(at);
        self
    }

    /// Only jobs that finished (done, dead or cancelled) at or after `at`.
    pub fn finished_since(mut self, at: DateTime<Utc>) -> Self {
        self.finished_since = Some(at);
        self
    }

    /// Only jobs that finished (done, dead or cancelled) before `at`.
    pub fn finished_until(mut self, at: DateTime<Utc>) -> Self {
        self.finished_until = Some(at);
        self
    }

    /// Only jobs one of whose recorded errors holds `text`, in any case.
    pub fn error_text(mut self, text: impl Into<String>) -> Self {
        self.error_text = Some(text.into());
        self
    }

    /// Whether the filter selects every job.
    pub fn is_all(&self) -> bool {
        *self == Self::default()
    }

    /// Refuses, before the database, a filter that cannot be searched.
    fn check(&self) -> Result<(), AdminError> {
        if let Some(kind) = &self.kind {
            check_kind_name(kind).map_err(|error| AdminError::InvalidFilter {
                field: "kind",
                problem: error.to_string(),
            })?;
        }
        if let Some(queue) = &self.queue {
            check_queue_name(queue)?;
        }
        if let Some(key) = &self.dedupe_key {
            refuse_empty("dedupe key", key)?;
            refuse_nul("dedupe key", key)?;
            if self.kind.is_none() {
                return Err(AdminError::InvalidFilter {
                    field: "dedupe key",
                    problem: "it needs a kind: dedupe keys are unique per kind".to_owned(),
                });
            }
        }
        if let Some(text) = &self.error_text {
            refuse_empty("error text", text)?;
            refuse_nul("error text", text)?;
            if text.len() > MAX_ERROR_TEXT_LEN {
                return Err(AdminError::InvalidText {
                    field: "error text",
                    problem: format!(
                        "is {} bytes long, more than the {MAX_ERROR_TEXT_LEN} allowed",
                        text.len()
                    ),
                });
            }
        }
        check_range("enqueued time", self.created_since, self.created_until)?;
        check_range("finished time", self.finished_since, self.finished_until)
    }
}

/// Refuses an empty search text.
fn refuse_empty(field: &'static str, text: &str) -> Result<(), AdminError> {
    if text.is_empty() {
        Err(AdminError::InvalidText {
            field,
            problem: "is empty".to_owned(),
        })
    } else {
        Ok(())
    }
}

/// Refuses a time range that ends before it starts.
fn check_range(
    field: &'static str,
    since: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
) -> Result<(), AdminError> {
    match (since, until) {
        (Some(since), Some(until)) if until < since => Err(AdminError::InvalidFilter {
            field,
            problem: format!(
                "the range ends ({}) before it starts ({})",
                until.to_rfc3339_opts(SecondsFormat::Secs, true),
                since.to_rfc3339_opts(SecondsFormat::Secs, true)
            ),
        }),
        _ => Ok(()),
    }
}

/// Where the next page of a search starts: below the last job a page showed or examined.
///
/// Its text form (`Display` / `FromStr`) is what a command line or a web page passes back;
/// it is only meaningful with the filter that produced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cursor(JobId);

impl Cursor {
    /// The page starts below this job id.
    pub fn before(self) -> JobId {
        self.0
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A text that is not a [`Cursor`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cursor `{0}`: pass the cursor a previous page gave (a positive number)")]
pub struct InvalidCursor(String);

impl FromStr for Cursor {
    type Err = InvalidCursor;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.parse::<JobId>() {
            Ok(id) if id > 0 && text.bytes().all(|byte| byte.is_ascii_digit()) => Ok(Cursor(id)),
            _ => Err(InvalidCursor(text.escape_debug().to_string())),
        }
    }
}

/// Which page of a search to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    /// Most jobs on the page, 1 to [`MAX_PAGE_SIZE`].
    pub limit: usize,
    /// Where the page starts; `None` for the first page (the newest jobs).
    pub after: Option<Cursor>,
}

impl PageRequest {
    /// The first page, of up to `limit` jobs.
    pub fn first(limit: usize) -> Self {
        Self { limit, after: None }
    }

    /// The page after `cursor`, of up to `limit` jobs.
    pub fn after(cursor: Cursor, limit: usize) -> Self {
        Self {
            limit,
            after: Some(cursor),
        }
    }

    fn check(&self) -> Result<(), AdminError> {
        if (1..=MAX_PAGE_SIZE).contains(&self.limit) {
            Ok(())
        } else {
            Err(AdminError::InvalidFilter {
                field: "page size",
                problem: format!(
                    "{} is out of range: a page holds 1 to {MAX_PAGE_SIZE} jobs",
                    self.limit
                ),
            })
        }
    }
}

impl Default for PageRequest {
    /// The first page of [`DEFAULT_PAGE_SIZE`] jobs.
    fn default() -> Self {
        Self::first(DEFAULT_PAGE_SIZE)
    }
}

/// A job as a search lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSummary {
    /// Its id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
    /// Its status when the page was read.
    pub status: JobStatus,
    /// Its priority (higher runs first).
    pub priority: i16,
    /// Attempts made.
    pub attempts: i32,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// When it is, or was, due.
    pub run_at: DateTime<Utc>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When it reached its final state (done, dead, cancelled), if it did.
    pub finished_at: Option<DateTime<Utc>>,
    /// Its dedupe key, when it has one.
    pub dedupe_key: Option<String>,
    /// How many errors its history holds.
    pub error_count: i32,
    /// Its latest error, if any ([`job_details`](super::job_details) has them all).
    pub last_error: Option<AttemptRecord>,
}

/// One page of a search.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPage {
    /// The jobs, newest first.
    pub jobs: Vec<JobSummary>,
    /// Where the next page starts; `None` once the search is exhausted. A full page always has
    /// one (the page after it may then be empty).
    pub next: Option<Cursor>,
    /// The page examined [`MAX_EXAMINED`] candidates before it filled: it may be short, even
    /// empty, though more jobs match beyond [`next`](Self::next).
    pub examination_bounded: bool,
}

/// The page `page` of the jobs `filter` selects, newest first. See the [module](self) for what
/// a page reads.
///
/// Refused before the database, with [`AdminError::InvalidFilter`],
/// [`AdminError::InvalidQueue`] or [`AdminError::InvalidText`], when the page size is not 1 to
/// [`MAX_PAGE_SIZE`], a kind or queue breaks the naming rules, a dedupe key comes without its
/// kind, a text is empty, holds U+0000 or is too long, or a time range ends before it starts.
pub async fn find_jobs(
    pool: &PgPool,
    filter: &JobFilter,
    page: &PageRequest,
) -> Result<JobPage, AdminError> {
    page.check()?;
    filter.check()?;
    let examine = MAX_EXAMINED.max(page.limit);
    let search = Search {
        id: filter.id,
        kind: filter.kind.as_deref(),
        queue: filter.queue.as_deref(),
        status: filter.status.map(JobStatus::as_str),
        dedupe_key: filter.dedupe_key.as_deref(),
        created_since: filter.created_since,
        created_until: filter.created_until,
        finished_since: filter.finished_since,
        finished_until: filter.finished_until,
        error_text: filter.error_text.as_deref(),
        before: page.after.map_or(JobId::MAX, Cursor::before),
        examine: i64::try_from(examine).unwrap_or(i64::MAX),
        limit: i64::try_from(page.limit).unwrap_or(i64::MAX),
    };
    let rows = store::find(pool, &search).await?;
    let last = rows.last().map(|row| (row.id, row.examined));
    let full = rows.len() == page.limit;
    let jobs = rows
        .into_iter()
        .filter(|row| row.matched)
        .map(summary)
        .collect::<Result<Vec<_>, _>>()?;
    let examination_bounded =
        last.is_some_and(|(_, examined)| examined == search.examine) && jobs.len() < page.limit;
    let next = match last {
        Some((id, _)) if full || examination_bounded => Some(Cursor(id)),
        _ => None,
    };
    Ok(JobPage {
        jobs,
        next,
        examination_bounded,
    })
}

/// A found row as a [`JobSummary`].
fn summary(row: FoundRow) -> Result<JobSummary, AdminError> {
    let status = row
        .status
        .parse()
        .map_err(|error: UnknownStatus| AdminError::Database(sqlx::Error::Decode(error.into())))?;
    Ok(JobSummary {
        id: row.id,
        kind: row.kind,
        queue: row.queue,
        status,
        priority: row.priority,
        attempts: row.attempts,
        max_attempts: row.max_attempts,
        run_at: row.run_at,
        created_at: row.created_at,
        finished_at: row.finished_at,
        dedupe_key: row.dedupe_key,
        error_count: row.error_count,
        last_error: row.last_error.map(|Json(record)| record),
    })
}
