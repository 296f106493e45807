//! Finding jobs: one page of a search, newest first, walked through an index in id order.
//!
//! Every statement binds the same parameters, a search in full:
//!
//! | | |
//! |---|---|
//! | `$1` | the job's id (NULL for any) |
//! | `$2` | its kind (NULL for any) |
//! | `$3` | its queue (NULL for any) |
//! | `$4` | its status: `waiting`, `ready` (due), `scheduled` (ready, `run_at` ahead), `running`, `done`, `dead` or `cancelled` (NULL for any) |
//! | `$5` | its dedupe key (NULL for any) |
//! | `$6`, `$7` | enqueued at or after, and before (NULL for no bound) |
//! | `$8`, `$9` | finished at or after, and before (NULL for no bound) |
//! | `$10` | a text one of its errors holds, any case (NULL for any) |
//! | `$11` | the id the page starts below (exclusive) |
//! | `$12` | how many candidates the page examines at most |
//! | `$13` | how many rows the page returns at most |
//!
//! The statements differ only in where their candidates come from: each reads, newest first,
//! an index that holds exactly the jobs its conditions can match, so that a page examines at
//! most `$12` rows of it (the live states' partial indexes are read whole and sorted: they hold
//! only live jobs, as the claims do). Every condition of the search is then checked on the
//! candidates, and the page ends after `$13` rows: the candidates that match, and the `$12`th
//! candidate whether it matches or not, which tells the caller where an exhausted examination
//! stopped.

use chrono::{DateTime, Utc};
use jobs_core::JobId;
use sqlx::types::Json;
use sqlx::{FromRow, PgPool};

use crate::admin::AttemptRecord;

/// A job's status as a search names it: its state, with `ready` split into due (`ready`) and
/// waiting for a later `run_at` (`scheduled`).
macro_rules! status_of_row {
    () => {
        "CASE WHEN state = 'ready' AND run_at > now() THEN 'scheduled' ELSE state END"
    };
}

/// The columns a candidate carries, read from `jobs_queue`.
macro_rules! candidate_columns {
    () => {
        concat!(
            "id, kind, queue, ",
            status_of_row!(),
            " AS status, priority, attempts, max_attempts, run_at, created_at, finished_at,
             dedupe_key, errors"
        )
    };
}

/// Every condition of the search (`$1`..`$10`), on a candidate `c`.
macro_rules! matching {
    () => {
        "($1::int8 IS NULL OR c.id = $1)
         AND ($2::text IS NULL OR c.kind = $2)
         AND ($3::text IS NULL OR c.queue = $3)
         AND ($4::text IS NULL OR c.status = $4)
         AND ($5::text IS NULL OR c.dedupe_key = $5)
         AND ($6::timestamptz IS NULL OR c.created_at >= $6)
         AND ($7::timestamptz IS NULL OR c.created_at < $7)
         AND ($8::timestamptz IS NULL OR c.finished_at >= $8)
         AND ($9::timestamptz IS NULL OR c.finished_at < $9)
         AND ($10::text IS NULL OR EXISTS (
                 SELECT FROM jsonb_array_elements(c.errors) AS attempt
                 WHERE strpos(lower(attempt ->> 'error'), lower($10)) > 0))"
    };
}

/// A page of the search over `candidates` (a query yielding [`candidate_columns!`] newest first,
/// at most `$12` rows): the candidates matching every condition, and the `$12`th candidate, at
/// most `$13` rows, newest first, each with whether it matched and how many candidates had been
/// examined when it was reached.
macro_rules! page_of {
    ($candidates:expr) => {
        concat!(
            "
SELECT id, kind, queue, status, priority, attempts, max_attempts, run_at, created_at,
       finished_at, dedupe_key, jsonb_array_length(errors) AS error_count,
       errors -> -1 AS last_error, matched, examined
FROM (
    SELECT c.*, (",
            matching!(),
            ") AS matched,
           row_number() OVER (ORDER BY c.id DESC) AS examined
    FROM (",
            $candidates,
            "
    ) AS c
) AS walked
WHERE matched OR examined = $12
ORDER BY id DESC
LIMIT $13"
        )
    };
}

/// Candidates in one state, one branch of a union, newest first, read only when the status
/// asked for (`$4`) is one of `$statuses` (a literal SQL list), so that the other branches cost
/// nothing: the ids of up to `$12` jobs meeting `$condition` below `$11`, read from a state's
/// partial index alone in the order `$order`, then those rows by primary key, newest first, as
/// the page pulls them.
///
/// `$order` is `id DESC` for an index ordered by id after the condition's columns (dead jobs
/// and finished jobs of a kind): the index is read backwards and stops after `$12` ids. It is
/// `id + 0 DESC`, an order no index gives, for an index that holds only live jobs (ready,
/// running, dead of any kind): it is read whole and sorted, which is bounded by the live jobs,
/// rather than walking the primary key past retained jobs in search of the state's, which the
/// planner may otherwise guess cheaper (it assumes the state's jobs spread evenly by id).
macro_rules! state_branch {
    ($statuses:literal, $condition:literal, $order:literal) => {
        concat!(
            "
        (SELECT ",
            candidate_columns!(),
            "
         FROM jobs_queue
         WHERE id = ANY(ARRAY(
                 SELECT id FROM jobs_queue
                 WHERE ($4::text IS NULL OR $4 IN ",
            $statuses,
            ") AND ",
            $condition,
            " AND id < $11
                 ORDER BY ",
            $order,
            "
                 LIMIT $12))
         ORDER BY id DESC
         LIMIT $12)"
        )
    };
}

/// A page of the job with id `$1`.
pub const FIND_BY_ID: &str = page_of!(concat!(
    "
        SELECT ",
    candidate_columns!(),
    "
        FROM jobs_queue
        WHERE id = $1 AND id < $11
        ORDER BY id DESC
        LIMIT $12"
));

/// Candidates holding dedupe key `$5` of kind `$2` in one of the dedupe indexes (the condition
/// `$partial` is its predicate).
macro_rules! dedupe_branch {
    ($($partial:tt)+) => {
        concat!(
            "
        (SELECT ",
            candidate_columns!(),
            "
         FROM jobs_queue
         WHERE kind = $2 AND ",
            same_dedupe_key!("dedupe_key", "$5"),
            " AND ",
            $($partial)+,
            " AND id < $11)"
        )
    };
}

/// A page of the jobs of kind `$2` holding dedupe key `$5`, found by the key's digest in the
/// three indexes that together hold every keyed job: `retained` keys in any state, `active`
/// keys of pending jobs, and `active` keys of finished jobs.
pub const FIND_BY_DEDUPE_KEY: &str = page_of!(concat!(
    dedupe_branch!("dedupe_scope = 'retained'"),
    "
        UNION ALL",
    dedupe_branch!("dedupe_scope = 'active' AND state IN ", pending_states!()),
    "
        UNION ALL",
    dedupe_branch!(
        "dedupe_scope = 'active' AND state NOT IN ",
        pending_states!()
    ),
    "
        ORDER BY id DESC
        LIMIT $12"
));

/// A page of the jobs of kind `$2`: waiting ones through the waiting-kind index by id, ready
/// ones through the ready index and running ones through
/// the lease index (sorted: they are live), dead ones through the dead index by id, done and
/// cancelled ones through the finished-kind index by id. Only the branches of the status asked
/// for are read.
pub const FIND_OF_KIND: &str = page_of!(concat!(
    state_branch!("('waiting')", "state = 'waiting' AND kind = $2", "id DESC"),
    "
        UNION ALL",
    state_branch!(
        "('ready', 'scheduled')",
        "state = 'ready' AND kind = $2 AND ($3::text IS NULL OR queue = $3)",
        "id + 0 DESC"
    ),
    "
        UNION ALL",
    state_branch!(
        "('running')",
        "state = 'running' AND kind = $2",
        "id + 0 DESC"
    ),
    "
        UNION ALL",
    state_branch!("('dead')", "state = 'dead' AND kind = $2", "id DESC"),
    "
        UNION ALL",
    state_branch!("('done')", "state = 'done' AND kind = $2", "id DESC"),
    "
        UNION ALL",
    state_branch!(
        "('cancelled')",
        "state = 'cancelled' AND kind = $2",
        "id DESC"
    ),
    "
        ORDER BY id DESC
        LIMIT $12"
));

/// A page of the live jobs of status `$4` (waiting, ready, scheduled, running or dead), of any
/// kind, through their state's partial index, sorted by id: these indexes hold only live jobs.
pub const FIND_LIVE: &str = page_of!(concat!(
    state_branch!(
        "('waiting')",
        "state = 'waiting' AND ($3::text IS NULL OR queue = $3)",
        "id + 0 DESC"
    ),
    "
        UNION ALL",
    state_branch!(
        "('ready', 'scheduled')",
        "state = 'ready' AND ($3::text IS NULL OR queue = $3)",
        "id + 0 DESC"
    ),
    "
        UNION ALL",
    state_branch!("('running')", "state = 'running'", "id + 0 DESC"),
    "
        UNION ALL",
    state_branch!("('dead')", "state = 'dead'", "id + 0 DESC"),
    "
        ORDER BY id DESC
        LIMIT $12"
));

/// A page of the newest jobs, whatever their state, walked backwards through the primary key:
/// the search for no kind, or for done or cancelled jobs of any kind.
pub const FIND_RECENT: &str = page_of!(concat!(
    "
        SELECT ",
    candidate_columns!(),
    "
        FROM jobs_queue
        WHERE id < $11
        ORDER BY id DESC
        LIMIT $12"
));

/// A search as the statements bind it (`$1`..`$13`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Search<'a> {
    pub(crate) id: Option<JobId>,
    pub(crate) kind: Option<&'a str>,
    pub(crate) queue: Option<&'a str>,
    pub(crate) status: Option<&'static str>,
    pub(crate) dedupe_key: Option<&'a str>,
    pub(crate) created_since: Option<DateTime<Utc>>,
    pub(crate) created_until: Option<DateTime<Utc>>,
    pub(crate) finished_since: Option<DateTime<Utc>>,
    pub(crate) finished_until: Option<DateTime<Utc>>,
    pub(crate) error_text: Option<&'a str>,
    /// The page starts below this id.
    pub(crate) before: JobId,
    /// Candidates examined at most.
    pub(crate) examine: i64,
    /// Rows returned at most.
    pub(crate) limit: i64,
}

impl Search<'_> {
    /// The statement whose candidates hold every job the search can match, and as few others
    /// as the indexes allow.
    pub(crate) fn statement(&self) -> &'static str {
        const LIVE: [&str; 5] = ["waiting", "ready", "scheduled", "running", "dead"];
        if self.id.is_some() {
            FIND_BY_ID
        } else if self.kind.is_some() && self.dedupe_key.is_some() {
            FIND_BY_DEDUPE_KEY
        } else if self.kind.is_some() {
            FIND_OF_KIND
        } else if self.status.is_some_and(|status| LIVE.contains(&status)) {
            FIND_LIVE
        } else {
            FIND_RECENT
        }
    }
}

/// One row of a page: a job, whether it matched, and how many candidates had been examined.
#[derive(Debug, FromRow)]
pub(crate) struct FoundRow {
    pub(crate) id: JobId,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) status: String,
    pub(crate) priority: i16,
    pub(crate) attempts: i32,
    pub(crate) max_attempts: i32,
    pub(crate) run_at: DateTime<Utc>,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) finished_at: Option<DateTime<Utc>>,
    pub(crate) dedupe_key: Option<String>,
    pub(crate) error_count: i32,
    pub(crate) last_error: Option<Json<AttemptRecord>>,
    pub(crate) matched: bool,
    pub(crate) examined: i64,
}

/// One page of `search`, through [`Search::statement`].
///
/// Planned for its parameters every time (an unnamed statement, never a cached generic plan):
/// whether a kind's done jobs are best read in id order or gathered and sorted depends on how
/// many the kind has, which only the kind itself tells the planner.
pub(crate) async fn find(pool: &PgPool, search: &Search<'_>) -> Result<Vec<FoundRow>, sqlx::Error> {
    sqlx::query_as(search.statement())
        .persistent(false)
        .bind(search.id)
        .bind(search.kind)
        .bind(search.queue)
        .bind(search.status)
        .bind(search.dedupe_key)
        .bind(search.created_since)
        .bind(search.created_until)
        .bind(search.finished_since)
        .bind(search.finished_until)
        .bind(search.error_text)
        .bind(search.before)
        .bind(search.examine)
        .bind(search.limit)
        .fetch_all(pool)
        .await
}
