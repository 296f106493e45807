//! Cancelling jobs: waiting and ready ones at once, running ones by a request their run
//! observes.
//!
//! A waiting job (for its prerequisites) or a ready one (due, or scheduled for a later `run_at`)
//! becomes `cancelled` and finished, so that
//! retention prunes it like a done job; no worker runs it afterwards, since claims take only
//! ready rows. Each statement locks the rows it changes and claims skip locked rows: a job is
//! either claimed first (then it is running, and gets a request) or cancelled first (then no
//! worker runs it). A running job keeps its lease and gets `cancel_requested_at`: the heartbeat
//! tells its run ([`HEARTBEAT`](super::outcomes::HEARTBEAT)), and its outcome, unless it
//! succeeded, is written as `cancelled` ([`RECORD_OUTCOMES`](super::outcomes::RECORD_OUTCOMES));
//! a rescue of it cancels it too ([`RESCUE_EXPIRED`](super::rescue::RESCUE_EXPIRED)). The
//! first request is kept: asking again changes nothing.

use jobs_core::JobId;
use sqlx::{FromRow, PgPool};

/// The channel on which a cancellation announces each running job asked to stop; the payload
/// is the job's id. A worker running that job renews its leases at once, which returns the
/// request: the run learns it without waiting for the next heartbeat. The notification itself
/// is only a hint; the request is read from the row.
pub const CANCEL_CHANNEL: &str = "jobs_cancel";

/// The cancellation of the jobs that the query `$asked` selects (id, kind, queue, state), with
/// `$1` who asks and `$2` why (may be NULL): each waiting or ready one is cancelled, each running one gets
/// a request (the first request is kept), announced on [`CANCEL_CHANNEL`] with its id; the
/// others are left alone. Returns every job selected, by id, with its state afterwards and
/// whether this statement changed it.
macro_rules! cancel_selected {
    ($($asked:tt)+) => {
        concat!(
            "
WITH asked AS (",
            $($asked)+,
            "
), changed AS (
    UPDATE jobs_queue AS j
    SET state = CASE WHEN j.state = 'running' THEN j.state ELSE 'cancelled' END,
        finished_at = CASE WHEN j.state = 'running' THEN j.finished_at ELSE now() END,
        cancel_requested_by = CASE WHEN j.cancel_requested_at IS NULL THEN $1
                                   ELSE j.cancel_requested_by END,
        cancel_reason = CASE WHEN j.cancel_requested_at IS NULL THEN $2 ELSE j.cancel_reason END,
        cancel_requested_at = coalesce(j.cancel_requested_at, now())
    FROM asked
    WHERE j.id = asked.id AND j.state IN ",
            pending_states!(),
            "
    RETURNING j.id, j.state, j.batch_id, j.has_dependents
), announced AS (
    SELECT pg_notify('jobs_cancel', id::text) FROM changed WHERE state = 'running'
), ",
            workflow_steps!("changed", "'ready'::text"),
            "
SELECT asked.id, asked.kind, asked.queue, coalesce(changed.state, asked.state) AS state,
       changed.id IS NOT NULL AS changed
FROM asked LEFT JOIN changed ON changed.id = asked.id
WHERE (SELECT count(*) FROM announced) >= 0 AND ",
            after_workflow_steps!(),
            "
ORDER BY asked.id"
        )
    };
}

/// Cancels the waiting and ready jobs of ids `$3` and asks the running ones to stop, recording who (`$1`)
/// and why (`$2`, may be NULL); see `cancel_selected!`. Returns every job of `$3` found, by
/// id, with its state afterwards and whether this statement changed it (ids not found are not
/// returned).
pub const CANCEL_JOBS: &str = cancel_selected!(
    "
    SELECT id, kind, queue, state FROM jobs_queue WHERE id = ANY($3::int8[])"
);

/// Cancels the waiting or ready job of kind `$3` holding dedupe key `$4`, or asks the running one to stop,
/// as [`CANCEL_JOBS`] does by id. The key is looked up through both dedupe indexes: the `active`
/// one (pending jobs) and the `retained` one (a job of any state, which then is
/// returned, unchanged when finished).
pub const CANCEL_BY_DEDUPE_KEY: &str = cancel_selected!(
    "
    SELECT id, kind, queue, state FROM jobs_queue
    WHERE kind = $3 AND dedupe_scope = 'active' AND state IN ",
    pending_states!(),
    " AND ",
    same_dedupe_key!("dedupe_key", "$4"),
    "
    UNION ALL
    SELECT id, kind, queue, state FROM jobs_queue
    WHERE kind = $3 AND dedupe_scope = 'retained' AND ",
    same_dedupe_key!("dedupe_key", "$4")
);

/// The condition selecting ready jobs by filter, shared by [`CANCEL_MATCHING`] and
/// [`COUNT_MATCHING`]: `$kind` kind, `$queue` queue (NULL for any), `$scheduled` whether the
/// job waits for a later `run_at` (true: scheduled, a retry backing off or a delayed job; false:
/// due now; NULL: either), `$age` seconds since it was enqueued at least (NULL for any). The
/// ready index `(queue, kind, ...)` serves it.
macro_rules! ready_matching {
    ($kind:literal, $queue:literal, $scheduled:literal, $age:literal) => {
        concat!(
            "state = 'ready'
      AND (",
            $kind,
            "::text IS NULL OR kind = ",
            $kind,
            ")
      AND (",
            $queue,
            "::text IS NULL OR queue = ",
            $queue,
            ")
      AND (",
            $scheduled,
            "::bool IS NULL OR (run_at > now()) = ",
            $scheduled,
            ")
      AND (",
            $age,
            "::float8 IS NULL OR created_at <= now() - make_interval(secs => ",
            $age,
            "))"
        )
    };
}

/// Cancels up to `$7` ready jobs matching `$3`..`$6` (kind, queue, scheduled, seconds since
/// enqueued; see `ready_matching!`), recording who (`$1`) and why (`$2`, may be NULL); returns
/// the jobs cancelled (id, kind, queue), in no particular order. The jobs cancelled leave the
/// ready index, so the next batch starts where this one ended, without a cursor. A job a claim
/// holds is waited for, then left alone: it is running by then.
pub const CANCEL_MATCHING: &str = concat!(
    "
WITH doomed AS (
    SELECT id FROM jobs_queue
    WHERE ",
    ready_matching!("$3", "$4", "$5", "$6"),
    "
    LIMIT $7
    FOR UPDATE
), cancelled AS (
    UPDATE jobs_queue AS j
    SET state = 'cancelled',
        finished_at = now(),
        cancel_requested_at = now(),
        cancel_requested_by = $1,
        cancel_reason = $2
    FROM doomed
    WHERE j.id = doomed.id AND j.state = 'ready'
    RETURNING j.id, j.kind, j.queue, j.state, j.batch_id, j.has_dependents
), ",
    workflow_steps!("cancelled", "'ready'::text"),
    "
SELECT id, kind, queue FROM cancelled
WHERE ",
    after_workflow_steps!()
);

/// How many ready jobs match `$1`..`$4` (kind, queue, scheduled, seconds since enqueued; see
/// `ready_matching!`): what [`CANCEL_MATCHING`], batch after batch, would cancel now.
pub const COUNT_MATCHING: &str = concat!(
    "SELECT count(*) FROM jobs_queue WHERE ",
    ready_matching!("$1", "$2", "$3", "$4")
);

/// Who asks for a cancellation, and why: recorded with every job cancelled or asked to stop.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Note<'a> {
    /// Who asks.
    pub(crate) by: &'a str,
    /// Why, if said.
    pub(crate) reason: Option<&'a str>,
}

/// Which ready jobs a filtered cancellation selects; each `None` selects all.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadySelection<'a> {
    /// The kind, if any.
    pub(crate) kind: Option<&'a str>,
    /// The queue, if any.
    pub(crate) queue: Option<&'a str>,
    /// Only scheduled jobs (true), only due ones (false).
    pub(crate) scheduled: Option<bool>,
    /// How long since they were enqueued, at least, in seconds.
    pub(crate) min_age_secs: Option<f64>,
}

/// A job a cancellation by id or dedupe key selected: its state afterwards, and whether the
/// statement changed it (cancelled it, or asked it to stop).
#[derive(Debug, Clone, FromRow)]
pub(crate) struct SelectedRow {
    pub(crate) id: JobId,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) state: String,
    pub(crate) changed: bool,
}

/// A job a filtered cancellation cancelled.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct CancelledRow {
    pub(crate) id: JobId,
    pub(crate) kind: String,
    pub(crate) queue: String,
}

/// Cancels the ready jobs among `ids` and asks the running ones to stop: [`CANCEL_JOBS`].
pub(crate) async fn cancel_jobs(
    pool: &PgPool,
    ids: &[JobId],
    note: Note<'_>,
) -> Result<Vec<SelectedRow>, sqlx::Error> {
    sqlx::query_as(CANCEL_JOBS)
        .bind(note.by)
        .bind(note.reason)
        .bind(ids)
        .fetch_all(pool)
        .await
}

/// Cancels the job of `kind` holding dedupe key `key`, or asks it to stop:
/// [`CANCEL_BY_DEDUPE_KEY`].
pub(crate) async fn cancel_by_dedupe_key(
    pool: &PgPool,
    kind: &str,
    key: &str,
    note: Note<'_>,
) -> Result<Vec<SelectedRow>, sqlx::Error> {
    sqlx::query_as(CANCEL_BY_DEDUPE_KEY)
        .bind(note.by)
        .bind(note.reason)
        .bind(kind)
        .bind(key)
        .fetch_all(pool)
        .await
}

/// Cancels up to `limit` ready jobs that `selection` selects: [`CANCEL_MATCHING`].
pub(crate) async fn cancel_matching(
    pool: &PgPool,
    selection: &ReadySelection<'_>,
    note: Note<'_>,
    limit: usize,
) -> Result<Vec<CancelledRow>, sqlx::Error> {
    sqlx::query_as(CANCEL_MATCHING)
        .bind(note.by)
        .bind(note.reason)
        .bind(selection.kind)
        .bind(selection.queue)
        .bind(selection.scheduled)
        .bind(selection.min_age_secs)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(pool)
        .await
}

/// How many ready jobs `selection` selects now: [`COUNT_MATCHING`].
pub(crate) async fn count_matching(
    pool: &PgPool,
    selection: &ReadySelection<'_>,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(COUNT_MATCHING)
        .bind(selection.kind)
        .bind(selection.queue)
        .bind(selection.scheduled)
        .bind(selection.min_age_secs)
        .fetch_one(pool)
        .await
}
