//! The queue's health numbers, counted by one process per interval and shared with the others.

use std::time::Duration;

use sqlx::types::Json;
use sqlx::{FromRow, PgPool, Row};

/// The text of [`QUEUE_STATS`], to be read alone or stored by [`SHARED_QUEUE_STATS`].
macro_rules! queue_stats {
    () => {
        "
WITH live AS (
    SELECT queue, kind,
           0::bigint AS waiting,
           count(*) FILTER (WHERE run_at <= now()) AS ready,
           count(*) FILTER (WHERE run_at > now()) AS scheduled,
           0::bigint AS running,
           0::bigint AS expired_leases,
           0::bigint AS dead,
           min(run_at) FILTER (WHERE run_at <= now()) AS oldest_ready_at,
           NULL::timestamptz AS oldest_expired_lease_at
    FROM jobs_queue WHERE state = 'ready'
    GROUP BY queue, kind
    UNION ALL
    SELECT queue, kind, 0, 0, 0, count(*), count(*) FILTER (WHERE lease_expires_at < now()), 0,
           NULL, min(lease_expires_at) FILTER (WHERE lease_expires_at < now())
    FROM jobs_queue WHERE state = 'running'
    GROUP BY queue, kind
    UNION ALL
    SELECT queue, kind, 0, 0, 0, 0, 0, count(*), NULL, NULL
    FROM jobs_queue WHERE state = 'dead'
    GROUP BY queue, kind
    UNION ALL
    SELECT queue, kind, count(*), 0, 0, 0, 0, 0, NULL, NULL
    FROM jobs_queue WHERE state = 'waiting'
    GROUP BY queue, kind
), jobs_table AS (
    SELECT c.reltuples, n.nspname
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = 'jobs_queue'::regclass
), sample AS (
    SELECT s.attnames, s.most_common_vals AS vals, s.most_common_freqs AS freqs, t.reltuples
    FROM pg_stats_ext s JOIN jobs_table t ON s.schemaname = t.nspname
    WHERE s.tablename = 'jobs_queue' AND s.statistics_name = 'jobs_queue_state_mix'
      AND s.most_common_vals IS NOT NULL
), retained AS (
    SELECT vals[i][array_position(attnames, 'queue')] AS queue,
           vals[i][array_position(attnames, 'kind')] AS kind,
           vals[i][array_position(attnames, 'state')] AS state,
           round(freqs[i] * greatest(reltuples, 0))::bigint AS estimate
    FROM sample, generate_subscripts(sample.vals, 1) AS i
), grouped AS (
    SELECT queue, kind,
           sum(waiting)::bigint AS waiting,
           sum(ready)::bigint AS ready,
           sum(scheduled)::bigint AS scheduled,
           sum(running)::bigint AS running,
           sum(expired_leases)::bigint AS expired_leases,
           sum(dead)::bigint AS dead,
           sum(done)::bigint AS done,
           sum(cancelled)::bigint AS cancelled,
           extract(epoch FROM now() - min(oldest_ready_at))::float8 AS oldest_ready_secs,
           extract(epoch FROM now() - min(oldest_expired_lease_at))::float8
               AS longest_expired_lease_secs
    FROM (
        SELECT queue, kind, waiting, ready, scheduled, running, expired_leases, dead,
               0::bigint AS done, 0::bigint AS cancelled, oldest_ready_at, oldest_expired_lease_at
        FROM live
        UNION ALL
        SELECT queue, kind, 0, 0, 0, 0, 0, 0,
               CASE WHEN state = 'done' THEN estimate ELSE 0 END,
               CASE WHEN state = 'cancelled' THEN estimate ELSE 0 END,
               NULL, NULL
        FROM retained WHERE state IN ('done', 'cancelled')
    ) AS counts
    GROUP BY queue, kind
), meta AS (
    SELECT EXISTS (SELECT FROM sample) AS estimated,
           (SELECT extract(epoch FROM now() - greatest(last_analyze, last_autoanalyze))::float8
            FROM pg_stat_user_tables WHERE relid = 'jobs_queue'::regclass) AS analyzed_secs_ago,
           extract(epoch FROM now())::float8 AS now_epoch,
           (SELECT coalesce(jsonb_agg(jsonb_build_object(
                       'name', name, 'kind', kind, 'queue', queue, 'description', description,
                       'missed', missed,
                       'created_at', extract(epoch FROM created_at)::float8,
                       'last_tick_at', extract(epoch FROM last_tick_at)::float8,
                       'last_success_at', extract(epoch FROM last_success_at)::float8)
                   ORDER BY name), '[]'::jsonb)
            FROM jobs_schedules) AS schedules,
           (SELECT count(*) FROM jobs_outbox WHERE state = 'pending') AS outbox_unpublished,
           (SELECT extract(epoch FROM now() - min(created_at))::float8
            FROM jobs_outbox WHERE state = 'pending') AS outbox_oldest_unpublished_secs,
           (SELECT count(*) FROM jobs_outbox WHERE state = 'parked') AS outbox_parked
)
SELECT meta.estimated, meta.analyzed_secs_ago, meta.now_epoch, meta.schedules,
       meta.outbox_unpublished, meta.outbox_oldest_unpublished_secs, meta.outbox_parked,
       grouped.*
FROM meta LEFT JOIN grouped ON true
ORDER BY grouped.queue, grouped.kind"
    };
}

/// The health numbers of every queue and kind, in one statement.
///
/// Live states are counted exactly, each through its own partial index (`jobs_queue_waiting`,
/// `jobs_queue_ready`, `jobs_queue_leases`, `jobs_queue_dead`), so the cost follows the live rows, never the
/// retained ones. Done and cancelled rows are not counted: their numbers are estimates, the
/// frequency of each combination in the planner's sample (the `jobs_queue_state_mix`
/// statistics, gathered by `ANALYZE` and autovacuum) times the table's estimated row count.
/// `pg_stats_ext` shows that sample only to the table's owner (and members of its role).
/// Where the sample is missing or says there are few, [`RETAINED_COUNTS`] counts them instead.
///
/// One row per queue and kind, ordered by both, each also carrying whether the estimates were
/// readable, how long ago the table was last analyzed, the schedules, and the outbox's numbers
/// (unpublished rows and the age of the oldest, counted through the pending-only index; parked
/// rows, through the parked-only index); a single row with a NULL queue when the table holds
/// nothing.
pub const QUEUE_STATS: &str = queue_stats!();

/// Advisory lock key that lets one process count the gauges' health numbers at a time
/// (`"jobs_gau"` as bytes).
pub const GAUGES_LOCK_KEY: i64 = 0x6a6f_6273_5f67_6175;

/// The health numbers of [`QUEUE_STATS`] as the gauges read them: counted by one process per
/// interval of `$1` seconds, and stored for the others.
///
/// The process whose statement finds the stored figures older than `$1` seconds and gets the
/// lock `$2` (with `pg_try_advisory_xact_lock`, so none waits) counts, and stores what it found
/// in `jobs_gauges` with the time; every other process reads the stored figures, taken at most
/// about one interval ago, without counting anything. Returns the rows of [`QUEUE_STATS`]
/// (none before the first count has been stored) with `counted`: whether this statement
/// counted them.
pub const SHARED_QUEUE_STATS: &str = concat!(
    "
WITH counted AS (
    UPDATE jobs_gauges
    SET counted_at = now(),
        figures = (SELECT jsonb_agg(to_jsonb(stats) ORDER BY stats.queue, stats.kind)
                   FROM (",
    queue_stats!(),
    ") AS stats)
    WHERE counted_at <= now() - make_interval(secs => $1) AND pg_try_advisory_xact_lock($2)
    RETURNING true AS counted, figures
), figures AS (
    SELECT counted, figures FROM counted
    UNION ALL
    SELECT false, figures FROM jobs_gauges WHERE NOT EXISTS (SELECT FROM counted)
)
SELECT figures.counted, stats.*
FROM figures,
     ROWS FROM (jsonb_to_recordset(figures.figures) AS (
         estimated bool, analyzed_secs_ago float8, now_epoch float8, schedules jsonb,
         outbox_unpublished bigint, outbox_oldest_unpublished_secs float8, outbox_parked bigint,
         queue text, kind text, waiting bigint, ready bigint, scheduled bigint, running bigint,
         expired_leases bigint, dead bigint, done bigint, cancelled bigint,
         oldest_ready_secs float8, longest_expired_lease_secs float8)) WITH ORDINALITY AS stats
ORDER BY stats.ordinality"
);

/// Most done and cancelled jobs [`RETAINED_COUNTS`] counts: below it, counting them exactly is
/// cheap; above it, the planner's estimates are the numbers to trust.
pub const EXACT_RETAINED_BOUND: i64 = 10_000;

/// The done and cancelled jobs of every queue and kind, counted exactly, reading at most `$1`
/// of them: for a table too small, or too new, for the planner's estimates of
/// [`QUEUE_STATS`] (before the first `ANALYZE`, they are missing altogether).
///
/// The rows are read through the retention index `jobs_queue_finished` (partial on these two
/// states, in `finished_at` order), so the cost is bounded by `$1` whatever the table holds,
/// live rows included. When the counts add up to `$1`, the count stopped there and is not
/// the whole: pass one more than the largest number to trust. One row per queue and kind
/// holding such jobs, ordered by both.
pub const RETAINED_COUNTS: &str = "
SELECT queue, kind,
       count(*) FILTER (WHERE state = 'done') AS done,
       count(*) FILTER (WHERE state = 'cancelled') AS cancelled
FROM (
    SELECT queue, kind, state
    FROM jobs_queue
    WHERE state IN ('done', 'cancelled')
    ORDER BY finished_at
    LIMIT $1
) AS retained
GROUP BY queue, kind
ORDER BY queue, kind";

/// One row of [`RETAINED_COUNTS`].
#[derive(FromRow)]
pub(crate) struct RetainedRow {
    pub(crate) queue: String,
    pub(crate) kind: String,
    pub(crate) done: i64,
    pub(crate) cancelled: i64,
}

/// The done and cancelled jobs of every queue and kind, counted up to one past
/// [`EXACT_RETAINED_BOUND`], and whether that is all of them (at most the bound were found).
pub(crate) async fn retained_counts(
    pool: &PgPool,
) -> Result<(Vec<RetainedRow>, bool), sqlx::Error> {
    let rows: Vec<RetainedRow> = sqlx::query_as(RETAINED_COUNTS)
        .bind(EXACT_RETAINED_BOUND + 1)
        .fetch_all(pool)
        .await?;
    let counted: i64 = rows.iter().map(|row| row.done + row.cancelled).sum();
    Ok((rows, counted <= EXACT_RETAINED_BOUND))
}

/// One schedule in the `schedules` column of [`QUEUE_STATS`].
#[derive(serde::Deserialize)]
pub(crate) struct ScheduleRow {
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) description: String,
    pub(crate) missed: String,
    pub(crate) created_at: f64,
    pub(crate) last_tick_at: f64,
    pub(crate) last_success_at: Option<f64>,
}

/// One row of [`QUEUE_STATS`] (or of [`SHARED_QUEUE_STATS`]).
#[derive(FromRow)]
pub(crate) struct StatsRow {
    pub(crate) estimated: bool,
    pub(crate) analyzed_secs_ago: Option<f64>,
    pub(crate) now_epoch: f64,
    pub(crate) schedules: Json<Vec<ScheduleRow>>,
    pub(crate) outbox_unpublished: i64,
    pub(crate) outbox_oldest_unpublished_secs: Option<f64>,
    pub(crate) outbox_parked: i64,
    pub(crate) queue: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) waiting: Option<i64>,
    pub(crate) ready: Option<i64>,
    pub(crate) scheduled: Option<i64>,
    pub(crate) running: Option<i64>,
    pub(crate) expired_leases: Option<i64>,
    pub(crate) dead: Option<i64>,
    pub(crate) done: Option<i64>,
    pub(crate) cancelled: Option<i64>,
    pub(crate) oldest_ready_secs: Option<f64>,
    pub(crate) longest_expired_lease_secs: Option<f64>,
}

/// The health numbers of every queue and kind, of the schedules and of the outbox, counted now.
pub(crate) async fn queue_stats(pool: &PgPool) -> Result<Vec<StatsRow>, sqlx::Error> {
    sqlx::query_as(QUEUE_STATS).fetch_all(pool).await
}

/// The rows of [`SHARED_QUEUE_STATS`] for a count every `interval`, and whether this call
/// counted (rather than read the figures another process stored).
pub(crate) async fn shared_queue_stats(
    pool: &PgPool,
    interval: Duration,
) -> Result<(Vec<StatsRow>, bool), sqlx::Error> {
    let rows = sqlx::query(SHARED_QUEUE_STATS)
        .bind(interval.as_secs_f64())
        .bind(GAUGES_LOCK_KEY)
        .fetch_all(pool)
        .await?;
    let counted = match rows.first() {
        Some(row) => row.try_get("counted")?,
        None => false,
    };
    let rows = rows
        .iter()
        .map(StatsRow::from_row)
        .collect::<Result<Vec<_>, _>>()?;
    Ok((rows, counted))
}

/// How many jobs of each kind `$1` started in the window `$2` (seconds) its rate limit holds,
/// up to now, from the starts its claims recorded (`jobs_rate_limits`): one probe of the
/// primary key per kind.
pub const STARTS_IN_WINDOW: &str = "
SELECT limited.kind,
       coalesce((SELECT sum(started.jobs)
                 FROM jobs_rate_limits AS rate,
                      unnest(rate.started_at, rate.started) AS started(at, jobs)
                 WHERE rate.kind = limited.kind
                   AND started.at > now() - make_interval(secs => limited.window_secs)),
                0)::int8 AS started
FROM unnest($1::text[], $2::float8[]) AS limited(kind, window_secs)";

/// How kind `$1`'s per-key limits are used: how many limit keys are at their limit (`$2` running
/// jobs, when not null; `$4` started in the last `$5` seconds, when not null), and how many due
/// jobs of those keys wait ready in queues `$3` (those of the kind that are not paused). The
/// running jobs are read through the index of running jobs, the starts through the rows of the
/// keys that started jobs within the window, and the waiting jobs through
/// `jobs_queue_ready_limit_key`, once per queue and key at its limit.
pub const KEY_LIMIT_USE: &str = "
WITH full_keys AS (
    SELECT limit_key AS key FROM jobs_queue
    WHERE state = 'running' AND kind = $1 AND limit_key IS NOT NULL AND $2::bigint IS NOT NULL
    GROUP BY limit_key
    HAVING count(*) >= $2
    UNION
    SELECT rate.key FROM jobs_key_rate_limits AS rate
    WHERE rate.kind = $1 AND $4::integer IS NOT NULL
      AND rate.last_started_at > now() - make_interval(secs => $5::float8)
      AND (SELECT sum(started.jobs) FROM unnest(rate.started_at, rate.started) AS started(at, jobs)
           WHERE started.at > now() - make_interval(secs => $5::float8)) >= $4
)
SELECT (SELECT count(*) FROM full_keys) AS keys_at_limit,
       (SELECT coalesce(sum(waiting.jobs), 0)::int8
        FROM full_keys
        CROSS JOIN unnest($3::text[]) AS queues(queue)
        CROSS JOIN LATERAL (
            SELECT count(*) AS jobs FROM jobs_queue
            WHERE state = 'ready' AND queue = queues.queue AND kind = $1
              AND limit_key = full_keys.key AND run_at <= now()
        ) AS waiting) AS held_back";

/// How kind `kind`'s per-key limits (`max_running` jobs, `rate`) are used: the keys at a limit,
/// and the due jobs they hold back in `queues`, by [`KEY_LIMIT_USE`].
pub(crate) async fn key_limit_use(
    pool: &PgPool,
    kind: &str,
    max_running: Option<u32>,
    rate: Option<jobs_core::RateLimit>,
    queues: &[&str],
) -> Result<(i64, i64), sqlx::Error> {
    sqlx::query_as(KEY_LIMIT_USE)
        .bind(kind)
        .bind(max_running.map(i64::from))
        .bind(queues)
        .bind(rate.map(|rate| i32::try_from(rate.jobs()).unwrap_or(i32::MAX)))
        .bind(rate.map(|rate| rate.per().as_secs_f64()))
        .fetch_one(pool)
        .await
}

/// How many jobs of each of `kinds` started in its window (`windows`, pairing): the kinds with
/// their counts, by [`STARTS_IN_WINDOW`].
pub(crate) async fn starts_in_window(
    pool: &PgPool,
    kinds: &[String],
    windows: &[f64],
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    sqlx::query_as(STARTS_IN_WINDOW)
        .bind(kinds)
        .bind(windows)
        .fetch_all(pool)
        .await
}
