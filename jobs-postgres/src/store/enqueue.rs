//! Inserting jobs: one, many, or many alike, with or without a dedupe key, and finding the
//! jobs that hold dedupe keys.

use std::collections::HashMap;
use std::time::UNIX_EPOCH;

use jobs_core::{JobId, NewJob, RunAt};
use sqlx::types::Json;
use sqlx::PgConnection;

/// Inserts one job without a dedupe key.
///
/// `$1` kind, `$2` queue, `$3` payload, `$4` priority, `$5` max attempts, `$6` run-at as epoch
/// seconds (or NULL), `$7` delay in seconds, `$8` dedupe key and `$9` dedupe scope (both NULL
/// here), `$10` fairness key and `$11` limit key (or NULL). Returns the new id. Announces the
/// queue when the job is ready at once and a worker watches the queue (see
/// [`watch`](super::watch)), with the filter that [`INSERT_JOBS`] describes: cheaper than a
/// `WITH` clause around the insert.
pub const INSERT_JOB: &str = concat!(
    "
INSERT INTO jobs_queue (kind, queue, payload, priority, max_attempts, run_at, dedupe_key, dedupe_scope,
                        fair_key, limit_key)
SELECT $1, $2, $3, $4, $5, COALESCE(to_timestamp($6), now() + make_interval(secs => $7)), $8, $9,
       $10, $11
WHERE (SELECT count(*) FROM (
           SELECT pg_notify('jobs_queue', $2)
           WHERE COALESCE(to_timestamp($6), now() + make_interval(secs => $7)) <= now()
             AND ",
    watched!("$2"),
    "
       ) AS announced) >= 0
RETURNING id"
);

/// Inserts one job with a dedupe key, or nothing when the key is held: the parameters of
/// [`INSERT_JOB`]; no row comes back on a conflict, and then nothing is announced. Skipping
/// conflicts costs a speculative insertion per row, which is why keyless jobs use
/// [`INSERT_JOB`].
pub const INSERT_DEDUPED_JOB: &str = concat!(
    "
WITH inserted AS (
    INSERT INTO jobs_queue (kind, queue, payload, priority, max_attempts, run_at, dedupe_key, dedupe_scope,
                            fair_key, limit_key)
    VALUES ($1, $2, $3, $4, $5,
            COALESCE(to_timestamp($6), now() + make_interval(secs => $7)),
            $8, $9, $10, $11)
    ON CONFLICT DO NOTHING
    RETURNING id, queue, run_at <= now() AS ready
), announced AS (
    SELECT pg_notify('jobs_queue', queue) FROM inserted WHERE ready AND ",
    watched!("queue"),
    "
)
SELECT id FROM inserted WHERE (SELECT count(*) FROM announced) >= 0"
);

/// The bulk insert, with or without skipping dedupe conflicts.
///
/// A plain `INSERT .. RETURNING` rather than one wrapped in a `WITH` clause: the wrapper stores
/// every returned row before reading it again, which costs about a quarter of the insert at
/// 10,000 rows. The announcement is an uncommon filter instead: an uncorrelated subquery that
/// PostgreSQL evaluates once, before the first row, notifying each queue that gets ready work
/// and that a worker watches (see [`watch`](super::watch)).
/// It is true whatever it notified, so it never filters a row; were the insert to fail, the
/// notification would go with its transaction.
macro_rules! insert_jobs {
    ($on_conflict:literal) => {
        concat!(
            "
INSERT INTO jobs_queue (kind, queue, payload, priority, max_attempts, run_at, dedupe_key, dedupe_scope,
                        fair_key, limit_key, batch_id)
SELECT kind, queue, payload, priority, max_attempts,
       COALESCE(to_timestamp(run_at_epoch), now() + make_interval(secs => delay_secs)),
       dedupe_key, dedupe_scope, fair_key, limit_key, $10::bigint
FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::smallint[], $5::integer[],
            $6::float8[], $7::float8[], $8::text[], $9::text[], $11::text[], $12::text[])
     WITH ORDINALITY AS input(kind, queue, payload, priority, max_attempts, run_at_epoch,
                              delay_secs, dedupe_key, dedupe_scope, fair_key, limit_key, position)
WHERE (SELECT count(*) FROM (
           SELECT pg_notify('jobs_queue', ready.queue)
           FROM (SELECT DISTINCT queue
                 FROM unnest($2::text[], $6::float8[], $7::float8[]) AS due(queue, run_at_epoch, delay_secs)
                 WHERE COALESCE(to_timestamp(run_at_epoch), now() + make_interval(secs => delay_secs)) <= now()
                ) AS ready
           WHERE ",
            watched!("ready.queue"),
            "
       ) AS announced) >= 0
ORDER BY position
",
            $on_conflict,
            "
RETURNING id, kind, dedupe_key"
        )
    };
}

/// Inserts many jobs without dedupe keys in one statement, rows in input order.
///
/// Arrays: `$1` kinds, `$2` queues, `$3` payloads, `$4` priorities, `$5` max attempts, `$6`
/// run-at epoch seconds (NULL for none), `$7` delays in seconds, `$8` dedupe keys, `$9` scopes,
/// `$11` fairness keys, `$12` limit keys; and `$10` the batch every row joins (NULL for none). Returns the id,
/// kind and dedupe key of each inserted row; ids grow in input order. Announces each queue
/// that got ready work once.
pub const INSERT_JOBS: &str = insert_jobs!("");

/// Inserts many jobs, some with dedupe keys, skipping rows whose key is held (also by an
/// earlier row of the same call): the parameters and rows of [`INSERT_JOBS`].
pub const INSERT_DEDUPED_JOBS: &str = insert_jobs!("ON CONFLICT DO NOTHING");

/// Inserts many jobs that share everything but their payload, without dedupe, fairness or limit
/// keys:
/// the common
/// bulk enqueue of one kind, which sends each shared value once instead of once per row.
///
/// `$1` kind, `$2` queue, `$3` priority, `$4` max attempts, `$5` run-at as epoch seconds (or
/// NULL), `$6` delay in seconds, `$7` the payloads, `$8` the batch every row joins (NULL for
/// none). Returns the id of each row; ids grow in input
/// order. Announces the queue once when the jobs are ready at once and a worker watches it (see
/// [`INSERT_JOBS`] for the form).
pub const INSERT_UNIFORM_JOBS: &str = concat!(
    "
INSERT INTO jobs_queue (kind, queue, payload, priority, max_attempts, run_at, batch_id)
SELECT $1, $2, input.payload, $3, $4,
       (SELECT COALESCE(to_timestamp($5), now() + make_interval(secs => $6))), $8::bigint
FROM unnest($7::jsonb[]) WITH ORDINALITY AS input(payload, position)
WHERE (SELECT count(*) FROM (
           SELECT pg_notify('jobs_queue', $2)
           WHERE COALESCE(to_timestamp($5), now() + make_interval(secs => $6)) <= now()
             AND ",
    watched!("$2"),
    "
       ) AS announced) >= 0
ORDER BY input.position
RETURNING id"
);

/// Finds the jobs holding dedupe keys: `$1` kinds, `$2` keys (pairwise). Returns the holder's
/// id with the kind and key it holds.
///
/// Each wanted key is looked up twice, once per partial unique index (`retained` keys, and
/// `active` keys of ready or running jobs), each branch with its index's predicate spelled
/// exactly, so that every lookup is an index probe whatever the table's size.
pub const FIND_DEDUPE_HOLDERS: &str = concat!(
    "
SELECT holder.id, wanted.kind, wanted.dedupe_key
FROM unnest($1::text[], $2::text[]) AS wanted(kind, dedupe_key)
CROSS JOIN LATERAL (
    SELECT j.id FROM jobs_queue AS j
    WHERE j.kind = wanted.kind
      AND ",
    same_dedupe_key!("j.dedupe_key", "wanted.dedupe_key"),
    "
      AND j.dedupe_scope = 'retained'
    UNION ALL
    SELECT j.id FROM jobs_queue AS j
    WHERE j.kind = wanted.kind
      AND ",
    same_dedupe_key!("j.dedupe_key", "wanted.dedupe_key"),
    "
      AND j.dedupe_scope = 'active' AND j.state IN ",
    pending_states!(),
    "
) AS holder"
);

/// Binds `$1`..`$11` of [`INSERT_JOB`] (kind, queue, payload, priority, max attempts, run-at
/// epoch, delay, dedupe key and scope, fairness key, limit key) from `job` to `query`: the columns of one job, shared by
/// every single-job insert.
macro_rules! bind_job_columns {
    ($query:expr, $job:expr) => {{
        let job: &NewJob = $job;
        let (run_at_epoch, delay_secs) = $crate::store::enqueue::run_at_params(job.run_at);
        $query
            .bind(job.kind)
            .bind(&job.queue)
            .bind(Json(&job.payload))
            .bind(job.priority)
            .bind($crate::store::enqueue::max_attempts_param(job))
            .bind(run_at_epoch)
            .bind(delay_secs)
            .bind(job.dedupe_key.as_deref())
            .bind(job.dedupe_key.as_ref().map(|_| job.dedupe_scope.as_str()))
            .bind(job.fair_key.as_deref())
            .bind(job.limit_key.as_deref())
    }};
}
pub(crate) use bind_job_columns;

/// When the job becomes ready, as the `(epoch seconds, delay seconds)` pair the SQL takes.
pub(crate) fn run_at_params(run_at: RunAt) -> (Option<f64>, f64) {
    match run_at {
        RunAt::Now => (None, 0.0),
        RunAt::After(delay) => (None, delay.as_secs_f64()),
        RunAt::At(when) => {
            let epoch = match when.duration_since(UNIX_EPOCH) {
                Ok(since) => since.as_secs_f64(),
                Err(before) => -before.duration().as_secs_f64(),
            };
            (Some(epoch), 0.0)
        }
    }
}

/// The job's `max_attempts` as the column's integer. Every path calls [`NewJob::check`] first,
/// which refuses a count the column cannot hold: nothing is ever stored lowered.
pub(crate) fn max_attempts_param(job: &NewJob) -> i32 {
    i32::try_from(job.max_attempts).expect("NewJob::check refuses max_attempts beyond i32")
}

/// Writes one job; returns its id, or `None` when its dedupe key is held (by another job, or
/// by a transaction still open that then committed).
pub(crate) async fn insert_job(
    conn: &mut PgConnection,
    job: &NewJob,
) -> Result<Option<JobId>, sqlx::Error> {
    let statement = match job.dedupe_key {
        Some(_) => INSERT_DEDUPED_JOB,
        None => INSERT_JOB,
    };
    bind_job_columns!(sqlx::query_scalar(statement), job)
        .fetch_optional(&mut *conn)
        .await
}

/// Whether `job` differs from `first` in its payload alone and has no key (dedupe, fairness,
/// limit), so that both can be written by [`INSERT_UNIFORM_JOBS`], which writes neither.
pub(crate) fn same_shape(first: &NewJob, job: &NewJob) -> bool {
    job.kind == first.kind
        && job.queue == first.queue
        && job.priority == first.priority
        && job.max_attempts == first.max_attempts
        && job.run_at == first.run_at
        && job.dedupe_key.is_none()
        && job.fair_key.is_none()
        && job.limit_key.is_none()
}

/// Writes jobs shaped like `shape` (see [`same_shape`]), sending the shared values once, as
/// members of `batch` when given.
/// Returns the new ids, in no particular order.
pub(crate) async fn insert_uniform_jobs(
    conn: &mut PgConnection,
    shape: &NewJob,
    jobs: &[NewJob],
    batch: Option<i64>,
) -> Result<Vec<JobId>, sqlx::Error> {
    let (run_at_epoch, delay_secs) = run_at_params(shape.run_at);
    let payloads: Vec<Json<&serde_json::Value>> =
        jobs.iter().map(|job| Json(&job.payload)).collect();
    sqlx::query_scalar(INSERT_UNIFORM_JOBS)
        .bind(shape.kind)
        .bind(&shape.queue)
        .bind(shape.priority)
        .bind(max_attempts_param(shape))
        .bind(run_at_epoch)
        .bind(delay_secs)
        .bind(&payloads)
        .bind(batch)
        .fetch_all(&mut *conn)
        .await
}

/// Writes jobs of any shape, with or without dedupe keys, one array per column, as members of
/// `batch` when given. Returns the
/// rows written, `(id, kind, dedupe key)`, in no particular order: a job whose key was held
/// has none.
pub(crate) async fn insert_jobs(
    conn: &mut PgConnection,
    jobs: &[NewJob],
    batch: Option<i64>,
) -> Result<Vec<(JobId, String, Option<String>)>, sqlx::Error> {
    let mut kinds = Vec::with_capacity(jobs.len());
    let mut queues = Vec::with_capacity(jobs.len());
    let mut payloads = Vec::with_capacity(jobs.len());
    let mut priorities = Vec::with_capacity(jobs.len());
    let mut max_attempts = Vec::with_capacity(jobs.len());
    let mut run_at_epochs = Vec::with_capacity(jobs.len());
    let mut delays = Vec::with_capacity(jobs.len());
    let mut dedupe_keys = Vec::with_capacity(jobs.len());
    let mut dedupe_scopes = Vec::with_capacity(jobs.len());
    let mut fair_keys = Vec::with_capacity(jobs.len());
    let mut limit_keys = Vec::with_capacity(jobs.len());
    for job in jobs {
        let (run_at_epoch, delay_secs) = run_at_params(job.run_at);
        kinds.push(job.kind);
        queues.push(job.queue.as_str());
        payloads.push(Json(&job.payload));
        priorities.push(job.priority);
        max_attempts.push(max_attempts_param(job));
        run_at_epochs.push(run_at_epoch);
        delays.push(delay_secs);
        dedupe_keys.push(job.dedupe_key.as_deref());
        dedupe_scopes.push(job.dedupe_key.as_ref().map(|_| job.dedupe_scope.as_str()));
        fair_keys.push(job.fair_key.as_deref());
        limit_keys.push(job.limit_key.as_deref());
    }
    let statement = if dedupe_keys.iter().any(Option::is_some) {
        INSERT_DEDUPED_JOBS
    } else {
        INSERT_JOBS
    };
    sqlx::query_as(statement)
        .bind(&kinds)
        .bind(&queues)
        .bind(&payloads)
        .bind(&priorities)
        .bind(&max_attempts)
        .bind(&run_at_epochs)
        .bind(&delays)
        .bind(&dedupe_keys)
        .bind(&dedupe_scopes)
        .bind(batch)
        .bind(&fair_keys)
        .bind(&limit_keys)
        .fetch_all(&mut *conn)
        .await
}

/// The ids of the jobs holding each `(kind, dedupe key)` of `wanted`, by kind and key.
pub(crate) async fn find_dedupe_holders(
    conn: &mut PgConnection,
    wanted: &[(&'static str, String)],
) -> Result<HashMap<(String, String), JobId>, sqlx::Error> {
    let kinds: Vec<&str> = wanted.iter().map(|(kind, _)| *kind).collect();
    let keys: Vec<&str> = wanted.iter().map(|(_, key)| key.as_str()).collect();
    let rows: Vec<(JobId, String, String)> = sqlx::query_as(FIND_DEDUPE_HOLDERS)
        .bind(&kinds)
        .bind(&keys)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(id, kind, key)| ((kind, key), id))
        .collect())
}
