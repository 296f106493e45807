//! Dead jobs: counting, listing, showing, replaying and discarding them.

use std::marker::PhantomData;

use jobs_core::JobId;
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::{FromRow, PgPool};

use crate::admin::dead::{AttemptRecord, JobDetails, JobRef};

/// The condition selecting dead jobs, shared by the dead-letter statements: `$1` ids (NULL for
/// any), `$2` kind (NULL for any), `$3` queue (NULL for any), `$4` seconds the job must have been
/// dead for at least (NULL for any). A dead job's death is its `finished_at`.
macro_rules! dead_jobs_matching {
    () => {
        "state = 'dead'
      AND ($1::bigint[] IS NULL OR id = ANY($1))
      AND ($2::text IS NULL OR kind = $2)
      AND ($3::text IS NULL OR queue = $3)
      AND ($4::float8 IS NULL
           OR coalesce(finished_at, attempted_at, created_at) <= now() - make_interval(secs => $4))"
    };
}

/// Counts the dead jobs matching `$1`..`$4` (see the dead-job filter above).
pub const COUNT_DEAD: &str = concat!(
    "SELECT count(*) FROM jobs_queue WHERE ",
    dead_jobs_matching!()
);

/// Lists up to `$6` dead jobs matching `$1`..`$4` with an id above `$5`, by id, each with its
/// latest error.
pub const LIST_DEAD: &str = concat!(
    "
SELECT id, kind, queue, attempts, max_attempts, dedupe_key,
       extract(epoch FROM now() - coalesce(finished_at, attempted_at, created_at))::float8
           AS dead_for_secs,
       jsonb_array_length(errors) AS error_count,
       errors -> -1 AS last_error
FROM jobs_queue
WHERE id > $5 AND ",
    dead_jobs_matching!(),
    "
ORDER BY id
LIMIT $6"
);

/// Every column of job `$1` an operator looks at, whatever its state; timestamps as RFC 3339 in
/// UTC. With its workflow links: its prerequisites (id, kind and state, NULL when gone, and
/// what it does if one fails) and its dependents (id, kind, state), at most 1,000 of each by
/// id, with the number of dependents; the batch it is a member of, and the batch it is the
/// callback of.
pub const JOB_DETAILS: &str = "
SELECT j.id, j.kind, j.queue, j.state, j.priority, j.attempts, j.max_attempts, j.payload,
       j.dedupe_key, j.dedupe_scope, j.errors,
       to_char(j.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS created_at,
       to_char(j.run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS run_at,
       to_char(j.attempted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
           AS attempted_at,
       to_char(j.finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
           AS finished_at,
       to_char(j.lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
           AS lease_expires_at,
       to_char(j.cancel_requested_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
           AS cancel_requested_at,
       j.cancel_requested_by, j.cancel_reason, j.output,
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'id', e.prerequisite_id, 'kind', p.kind, 'state', p.state,
                   'on_failure', e.on_failure) ORDER BY e.prerequisite_id), '[]'::jsonb)
        FROM (SELECT prerequisite_id, on_failure FROM jobs_dependencies
              WHERE dependent_id = j.id ORDER BY prerequisite_id LIMIT 1000) AS e
        LEFT JOIN jobs_queue AS p ON p.id = e.prerequisite_id) AS prerequisites,
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'id', d.id, 'kind', d.kind, 'state', d.state) ORDER BY d.id), '[]'::jsonb)
        FROM (SELECT dependent_id FROM jobs_dependencies
              WHERE prerequisite_id = j.id ORDER BY dependent_id LIMIT 1000) AS e
        JOIN jobs_queue AS d ON d.id = e.dependent_id) AS dependents,
       (SELECT count(*) FROM jobs_dependencies WHERE prerequisite_id = j.id) AS dependent_count,
       j.batch_id,
       (SELECT b.id FROM jobs_batches AS b WHERE b.callback_id = j.id) AS callback_of,
       j.cancelled_by_prerequisite
FROM jobs_queue AS j
WHERE j.id = $1";

/// Up to `$6` dead jobs matching `$1`..`$4` with an id above `$5`, by id: the candidates of
/// [`REPLAY_DEAD`] and [`PREVIEW_REPLAY_DEAD`].
macro_rules! dead_candidates {
    () => {
        concat!(
            "SELECT id, kind, queue, dedupe_key, dedupe_scope
    FROM jobs_queue
    WHERE id > $5 AND ",
            dead_jobs_matching!(),
            "
    ORDER BY id
    LIMIT $6"
        )
    };
}

/// The ready or running job holding the `active` dedupe key of dead job `c`, if any: a probe of
/// the active dedupe index by key digest, shared by [`REPLAY_DEAD`] and [`PREVIEW_REPLAY_DEAD`]
/// so that a preview foretells the replay.
macro_rules! active_key_holder {
    () => {
        concat!(
            "(SELECT holder.id FROM jobs_queue AS holder
                WHERE holder.kind = c.kind AND ",
            same_dedupe_key!("holder.dedupe_key", "c.dedupe_key"),
            "
                  AND holder.dedupe_scope = 'active' AND holder.state IN ",
            pending_states!(),
            "
                LIMIT 1)"
        )
    };
}

/// Replays up to `$6` dead jobs matching `$1`..`$4` with an id above `$5`, by id: each becomes
/// ready at once with its attempts reset to 0 and its error history kept; every queue that got
/// a job back is announced once.
///
/// A job whose dedupe scope is `active` is skipped when another job holds its key (one that is
/// ready or running, or an earlier job of the same batch being replayed): making it ready would
/// break the key's uniqueness. Returns every candidate, replayed or not, with the id of the job
/// holding its key when it was skipped.
pub const REPLAY_DEAD: &str = concat!(
    "
WITH candidates AS (
    ",
    dead_candidates!(),
    "
    FOR UPDATE SKIP LOCKED
), checked AS (
    SELECT c.id, c.kind, c.queue, c.dedupe_key,
           CASE WHEN c.dedupe_scope = 'active' THEN coalesce(
               ",
    active_key_holder!(),
    ",
               nullif(first_value(c.id) OVER (PARTITION BY c.kind, c.dedupe_key, c.dedupe_scope
                                              ORDER BY c.id), c.id))
           END AS held_by
    FROM candidates AS c
), replayed AS (
    UPDATE jobs_queue AS j
    SET state = 'ready',
        attempts = 0,
        run_at = now(),
        finished_at = NULL
    FROM checked
    WHERE j.id = checked.id AND checked.held_by IS NULL
    RETURNING j.id, j.queue, j.state, j.batch_id, j.has_dependents
), notified AS (
    SELECT pg_notify('jobs_queue', queue) FROM (SELECT DISTINCT queue FROM replayed) AS queues
), ",
    workflow_steps!("replayed", "'dead'::text"),
    "
SELECT checked.id, checked.kind, checked.queue, checked.dedupe_key, checked.held_by,
       (SELECT count(*) FROM notified) AS notified
FROM checked
WHERE ",
    after_workflow_steps!(),
    "
ORDER BY checked.id"
);

/// What [`REPLAY_DEAD`] would do, changing nothing: up to `$6` dead jobs matching `$1`..`$4`
/// with an id above `$5`, by id, each with the id of the job holding its `active` dedupe key when
/// a replay would skip it. The holder is a ready or running job, or else the first dead job of
/// the whole selection with the same key (the one a replay makes ready first, in an earlier
/// batch or this one).
pub const PREVIEW_REPLAY_DEAD: &str = concat!(
    "
WITH candidates AS (
    ",
    dead_candidates!(),
    "
)
SELECT c.id, c.kind, c.queue, c.dedupe_key,
       CASE WHEN c.dedupe_scope = 'active' THEN coalesce(
           ",
    active_key_holder!(),
    ",
           (SELECT min(id) FROM jobs_queue
            WHERE kind = c.kind AND dedupe_key = c.dedupe_key AND dedupe_scope = 'active'
              AND id < c.id AND ",
    dead_jobs_matching!(),
    "))
       END AS held_by
FROM candidates AS c
ORDER BY c.id"
);

/// Deletes up to `$6` dead jobs matching `$1`..`$4` with an id above `$5`, by id; returns the
/// deleted ones.
pub const DISCARD_DEAD: &str = concat!(
    "
WITH doomed AS (
    SELECT id FROM jobs_queue
    WHERE id > $5 AND ",
    dead_jobs_matching!(),
    "
    ORDER BY id
    LIMIT $6
    FOR UPDATE SKIP LOCKED
)
DELETE FROM jobs_queue AS j
USING doomed
WHERE j.id = doomed.id
RETURNING j.id, j.kind, j.queue"
);

/// What [`DISCARD_DEAD`] would delete, changing nothing: up to `$6` dead jobs matching
/// `$1`..`$4` with an id above `$5`, by id.
pub const PREVIEW_DISCARD_DEAD: &str = concat!(
    "
SELECT id, kind, queue FROM jobs_queue
WHERE id > $5 AND ",
    dead_jobs_matching!(),
    "
ORDER BY id
LIMIT $6"
);

/// Which dead jobs a statement selects: `$1` ids (all when `NULL`), `$2` kind, `$3` queue, `$4`
/// seconds dead at least; each `NULL` selects all.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeadSelection<'a> {
    /// The ids asked for, if any.
    pub(crate) ids: Option<&'a [JobId]>,
    /// The kind, if any.
    pub(crate) kind: Option<&'a str>,
    /// The queue, if any.
    pub(crate) queue: Option<&'a str>,
    /// How long the jobs have been dead at least, in seconds, if asked.
    pub(crate) min_dead_secs: Option<f64>,
}

/// Binds a [`DeadSelection`] as the parameters `$1`..`$4` of the dead-letter statements.
macro_rules! bind_selection {
    ($query:expr, $selection:expr) => {
        $query
            .bind($selection.ids)
            .bind($selection.kind)
            .bind($selection.queue)
            .bind($selection.min_dead_secs)
    };
}

/// A batch statement over dead letters and the rows it returns: every one binds the same
/// parameters (a [`DeadSelection`], the id to resume after, a limit) and is run by [`batch`].
pub(crate) struct DeadBatch<R> {
    statement: &'static str,
    rows: PhantomData<fn() -> R>,
}

impl<R> Clone for DeadBatch<R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R> Copy for DeadBatch<R> {}

/// A row of a dead-letter batch, which batches resume after by id.
pub(crate) trait HasJobId {
    /// The job's id.
    fn job_id(&self) -> JobId;
}

impl HasJobId for JobRef {
    fn job_id(&self) -> JobId {
        self.id
    }
}

impl HasJobId for CandidateRow {
    fn job_id(&self) -> JobId {
        self.id
    }
}

impl<R> DeadBatch<R> {
    const fn new(statement: &'static str) -> Self {
        Self {
            statement,
            rows: PhantomData,
        }
    }
}

/// Up to `limit` dead jobs by id: [`LIST_DEAD`].
pub(crate) const LIST: DeadBatch<DeadJobRow> = DeadBatch::new(LIST_DEAD);
/// Replays a batch, skipping jobs whose `active` dedupe key another job holds; returns every job
/// selected: [`REPLAY_DEAD`].
pub(crate) const REPLAY: DeadBatch<CandidateRow> = DeadBatch::new(REPLAY_DEAD);
/// What [`REPLAY`] would select and skip, changing nothing: [`PREVIEW_REPLAY_DEAD`].
pub(crate) const PREVIEW_REPLAY: DeadBatch<CandidateRow> = DeadBatch::new(PREVIEW_REPLAY_DEAD);
/// Deletes a batch; returns the jobs deleted, in no particular order: [`DISCARD_DEAD`].
pub(crate) const DISCARD: DeadBatch<JobRef> = DeadBatch::new(DISCARD_DEAD);
/// What [`DISCARD`] would delete, by id, changing nothing: [`PREVIEW_DISCARD_DEAD`].
pub(crate) const PREVIEW_DISCARD: DeadBatch<JobRef> = DeadBatch::new(PREVIEW_DISCARD_DEAD);

/// The rows `statement` returns for the dead jobs `selection` selects with an id above `after`,
/// up to `limit`.
pub(crate) async fn batch<R>(
    pool: &PgPool,
    statement: DeadBatch<R>,
    selection: &DeadSelection<'_>,
    after: JobId,
    limit: usize,
) -> Result<Vec<R>, sqlx::Error>
where
    R: for<'r> FromRow<'r, PgRow> + Send + Unpin,
{
    bind_selection!(sqlx::query_as(statement.statement), selection)
        .bind(after)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(pool)
        .await
}

/// One dead job as [`LIST_DEAD`] returns it.
#[derive(FromRow)]
pub(crate) struct DeadJobRow {
    pub(crate) id: JobId,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) attempts: i32,
    pub(crate) max_attempts: i32,
    pub(crate) dedupe_key: Option<String>,
    pub(crate) dead_for_secs: Option<f64>,
    pub(crate) error_count: i32,
    pub(crate) last_error: Option<Json<AttemptRecord>>,
}

/// A dead job a replay selected, with the job holding its `active` dedupe key, if another does
/// (then it is skipped).
#[derive(FromRow)]
pub(crate) struct CandidateRow {
    pub(crate) id: JobId,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) dedupe_key: Option<String>,
    pub(crate) held_by: Option<JobId>,
}

/// How many dead jobs `selection` selects.
pub(crate) async fn count_dead(
    pool: &PgPool,
    selection: &DeadSelection<'_>,
) -> Result<i64, sqlx::Error> {
    bind_selection!(sqlx::query_scalar(COUNT_DEAD), selection)
        .fetch_one(pool)
        .await
}

/// Job `id` with its whole error history, whatever its state.
pub(crate) async fn job_details(
    pool: &PgPool,
    id: JobId,
) -> Result<Option<JobDetails>, sqlx::Error> {
    sqlx::query_as(JOB_DETAILS)
        .bind(id)
        .fetch_optional(pool)
        .await
}
