//! Every SQL statement the backend runs, in one place.
//!
//! Times come from the database clock (`now()`), durations are passed as seconds (`float8`),
//! and every write to a running job is fenced by its lease token.

/// The channel on which enqueue announces ready work; the payload is the queue name.
pub const NOTIFY_CHANNEL: &str = "jobs_queue";

/// Advisory lock key that serializes migrations across processes (`"jobs_migrations"` as bytes).
pub const MIGRATION_LOCK_KEY: i64 = 0x6a6f_6273_5f6d_6967;

/// Takes the migration lock for the current transaction.
pub const LOCK_MIGRATIONS: &str = "SELECT pg_advisory_xact_lock($1)";

/// Creates the framework's own migration history, apart from the application's.
pub const CREATE_MIGRATIONS_TABLE: &str = "
CREATE TABLE IF NOT EXISTS jobs_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)";

/// Whether the migration history exists yet (a read, which needs no CREATE privilege).
pub const MIGRATIONS_TABLE_EXISTS: &str = "SELECT to_regclass('jobs_migrations') IS NOT NULL";

/// Adds the checksum of each migration to a history written before checksums were recorded.
pub const ADD_MIGRATION_CHECKSUMS: &str =
    "ALTER TABLE jobs_migrations ADD COLUMN IF NOT EXISTS checksum text";

/// Versions, names and checksums already applied. The checksum is read through the row's JSON
/// so that a history without the column (written by an older version) reads as NULL checksums.
pub const APPLIED_MIGRATIONS: &str = "
SELECT version, name, to_jsonb(m) ->> 'checksum' AS checksum
FROM jobs_migrations AS m ORDER BY version";

/// Records one applied migration with its checksum.
pub const RECORD_MIGRATION: &str =
    "INSERT INTO jobs_migrations (version, name, checksum) VALUES ($1, $2, $3)";

/// Records the checksum `$2` of migration `$1`, applied before checksums were recorded.
pub const RECORD_MIGRATION_CHECKSUM: &str =
    "UPDATE jobs_migrations SET checksum = $2 WHERE version = $1 AND checksum IS NULL";

/// Inserts one job without a dedupe key.
///
/// `$1` kind, `$2` queue, `$3` payload, `$4` priority, `$5` max attempts, `$6` run-at as epoch
/// seconds (or NULL), `$7` delay in seconds, `$8` dedupe key and `$9` dedupe scope (both NULL
/// here). Returns the new id. Announces the queue when the job is ready at once, with the filter
/// that [`INSERT_JOBS`] describes: cheaper than a `WITH` clause around the insert.
pub const INSERT_JOB: &str = "
INSERT INTO jobs_queue (kind, queue, payload, priority, max_attempts, run_at, dedupe_key, dedupe_scope)
SELECT $1, $2, $3, $4, $5, COALESCE(to_timestamp($6), now() + make_interval(secs => $7)), $8, $9
WHERE (SELECT count(*) FROM (
           SELECT pg_notify('jobs_queue', $2)
           WHERE COALESCE(to_timestamp($6), now() + make_interval(secs => $7)) <= now()
       ) AS announced) >= 0
RETURNING id";

/// Inserts one job with a dedupe key, or nothing when the key is held: the parameters of
/// [`INSERT_JOB`]; no row comes back on a conflict, and then nothing is announced. Skipping
/// conflicts costs a speculative insertion per row, which is why keyless jobs use
/// [`INSERT_JOB`].
pub const INSERT_DEDUPED_JOB: &str = "
WITH inserted AS (
    INSERT INTO jobs_queue (kind, queue, payload, priority, max_attempts, run_at, dedupe_key, dedupe_scope)
    VALUES ($1, $2, $3, $4, $5,
            COALESCE(to_timestamp($6), now() + make_interval(secs => $7)),
            $8, $9)
    ON CONFLICT DO NOTHING
    RETURNING id, queue, run_at <= now() AS ready
), announced AS (
    SELECT pg_notify('jobs_queue', queue) FROM inserted WHERE ready
)
SELECT id FROM inserted WHERE (SELECT count(*) FROM announced) >= 0";

/// The bulk insert, with or without skipping dedupe conflicts.
///
/// A plain `INSERT .. RETURNING` rather than one wrapped in a `WITH` clause: the wrapper stores
/// every returned row before reading it again, which costs about a quarter of the insert at
/// 10,000 rows. The announcement is an uncommon filter instead: an uncorrelated subquery that
/// PostgreSQL evaluates once, before the first row, notifying each queue that gets ready work.
/// It is true whatever it notified, so it never filters a row; were the insert to fail, the
/// notification would go with its transaction.
macro_rules! insert_jobs {
    ($on_conflict:literal) => {
        concat!(
            "
INSERT INTO jobs_queue (kind, queue, payload, priority, max_attempts, run_at, dedupe_key, dedupe_scope)
SELECT kind, queue, payload, priority, max_attempts,
       COALESCE(to_timestamp(run_at_epoch), now() + make_interval(secs => delay_secs)),
       dedupe_key, dedupe_scope
FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::smallint[], $5::integer[],
            $6::float8[], $7::float8[], $8::text[], $9::text[])
     WITH ORDINALITY AS input(kind, queue, payload, priority, max_attempts, run_at_epoch,
                              delay_secs, dedupe_key, dedupe_scope, position)
WHERE (SELECT count(*) FROM (
           SELECT pg_notify('jobs_queue', ready.queue)
           FROM (SELECT DISTINCT queue
                 FROM unnest($2::text[], $6::float8[], $7::float8[]) AS due(queue, run_at_epoch, delay_secs)
                 WHERE COALESCE(to_timestamp(run_at_epoch), now() + make_interval(secs => delay_secs)) <= now()
                ) AS ready
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
/// run-at epoch seconds (NULL for none), `$7` delays in seconds, `$8` dedupe keys, `$9` scopes.
/// Returns the id, kind and dedupe key of each inserted row; ids grow in input order. Announces
/// each queue that got ready work once.
pub const INSERT_JOBS: &str = insert_jobs!("");

/// Inserts many jobs, some with dedupe keys, skipping rows whose key is held (also by an
/// earlier row of the same call): the parameters and rows of [`INSERT_JOBS`].
pub const INSERT_DEDUPED_JOBS: &str = insert_jobs!("ON CONFLICT DO NOTHING");

/// Inserts many jobs that share everything but their payload, without dedupe keys: the common
/// bulk enqueue of one kind, which sends each shared value once instead of once per row.
///
/// `$1` kind, `$2` queue, `$3` priority, `$4` max attempts, `$5` run-at as epoch seconds (or
/// NULL), `$6` delay in seconds, `$7` the payloads. Returns the id of each row; ids grow in input
/// order. Announces the queue once when the jobs are ready at once (see [`INSERT_JOBS`] for the
/// form).
pub const INSERT_UNIFORM_JOBS: &str = "
INSERT INTO jobs_queue (kind, queue, payload, priority, max_attempts, run_at)
SELECT $1, $2, input.payload, $3, $4,
       (SELECT COALESCE(to_timestamp($5), now() + make_interval(secs => $6)))
FROM unnest($7::jsonb[]) WITH ORDINALITY AS input(payload, position)
WHERE (SELECT count(*) FROM (
           SELECT pg_notify('jobs_queue', $2)
           WHERE COALESCE(to_timestamp($5), now() + make_interval(secs => $6)) <= now()
       ) AS announced) >= 0
ORDER BY input.position
RETURNING id";

/// The digest of a dedupe key that the unique dedupe indexes hold (migration 6 explains the
/// form): a statement looking a key up compares this expression of the column with the same
/// expression of the key it wants, so that the planner uses the index, then the key itself.
macro_rules! dedupe_digest {
    ($key:literal) => {
        concat!(
            "sha256(decode(replace(",
            $key,
            ", '\\', '\\\\'), 'escape'))"
        )
    };
}

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
    dedupe_digest!("j.dedupe_key"),
    " = ",
    dedupe_digest!("wanted.dedupe_key"),
    "
      AND j.dedupe_key = wanted.dedupe_key
      AND j.dedupe_scope = 'retained'
    UNION ALL
    SELECT j.id FROM jobs_queue AS j
    WHERE j.kind = wanted.kind
      AND ",
    dedupe_digest!("j.dedupe_key"),
    " = ",
    dedupe_digest!("wanted.dedupe_key"),
    "
      AND j.dedupe_key = wanted.dedupe_key
      AND j.dedupe_scope = 'active' AND j.state IN ('ready', 'running')
) AS holder"
);

/// The end every claim shares: each row of `claimable` becomes `running`, counts the attempt,
/// and takes a fresh lease token and a lease of `$lease` seconds (an SQL expression); returns
/// each claimed job with its place in the claim order and the seconds it had been due.
macro_rules! claimed_jobs {
    ($lease:literal) => {
        concat!(
            "
UPDATE jobs_queue AS j
SET state = 'running',
    attempts = j.attempts + 1,
    lease_token = gen_random_uuid(),
    lease_expires_at = now() + make_interval(secs => ",
            $lease,
            "),
    attempted_at = now()
FROM claimable
WHERE j.id = claimable.id
RETURNING j.id, j.kind, j.queue, j.payload::text AS payload, j.attempts, j.max_attempts,
          j.dedupe_key, j.lease_token, j.priority, j.run_at, j.created_at,
          extract(epoch FROM now() - j.run_at)::float8 AS waited_secs"
        )
    };
}

/// A claim of ready jobs of kinds `$2` from queue `$1`, up to `$3`, by priority (higher first),
/// then `run_at`, then id, with `$where` narrowing each kind's scan and `$guard` deciding once
/// whether to scan at all; each job is leased for the seconds that `$4` gives its kind (`$4`
/// pairs with `$2`).
///
/// Each kind is scanned apart, through the ready index's `(queue, kind, ...)` prefix, for its
/// first `$3` unlocked jobs in claim order, and the first `$3` of all those are claimed: jobs of
/// kinds this worker does not run (a rolling deploy, workers of different kinds on one queue)
/// cost it nothing, however many rank ahead. Jobs a kind's scan locked beyond those claimed stay
/// locked until the claim commits (other claims skip them meanwhile); that happens only when
/// several kinds have ready jobs at once.
///
/// The claim's transaction commits without waiting for its WAL to reach disk
/// (`synchronous_commit` off, set for that transaction alone by a subquery evaluated once): the
/// claim is the hottest write of the queue and sits between a job's enqueue and its start. A
/// claim lost in a PostgreSQL crash (not a worker crash: the commit is visible to every session
/// at once) leaves the job as it was, ready, and it runs again, which at-least-once allows; the
/// run under the lost claim cannot record anything, since every outcome is fenced by the lease
/// token, and any later durable commit flushes the claim with it. Outcomes, enqueues and the
/// claims of kinds with a running limit (whose count must survive a crash) keep waiting.
macro_rules! claim_jobs {
    ($where:literal, $guard:literal) => {
        concat!(
            "
WITH claimable AS (
    SELECT candidate.id
    FROM unnest($2::text[]) AS claimed(kind)
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at FROM jobs_queue
        WHERE state = 'ready' AND queue = $1 AND kind = claimed.kind AND run_at <= now()
          AND (SELECT set_config('synchronous_commit', 'off', true)) = 'off'",
            $where,
            "
        ORDER BY priority DESC, run_at, id
        LIMIT $3
        FOR UPDATE SKIP LOCKED
    ) AS candidate",
            $guard,
            "
    ORDER BY candidate.priority DESC, candidate.run_at, candidate.id
    LIMIT $3
)
",
            claimed_jobs!("($4::float8[])[array_position($2::text[], j.kind)]")
        )
    };
}

/// Claims up to `$3` ready jobs of kinds `$2` from queue `$1`, from the front of the claim
/// order: by priority (higher first), then `run_at`, then id; each is leased for the seconds
/// that `$4` gives its kind (`$4` pairs with `$2`). Returns each job with its place in the order
/// (`priority`, `run_at`, `id`) and the seconds it had been due when claimed (`waited_secs`).
pub const CLAIM_JOBS: &str = claim_jobs!("", "");

/// Claims as [`CLAIM_JOBS`] does, but only jobs of priority `$5` after the place `($6, $7)`
/// (`run_at`, id) in the claim order: where the previous claim of this queue ended; and nothing
/// at all when a due job of a higher priority than `$5` is ready (of kinds `$2` in queue `$1`),
/// so that the caller claims from the front instead.
///
/// The scan starts at that place in the ready index instead of its front. The front is where
/// the index entries of jobs claimed since the last vacuum pile up; while a long transaction
/// elsewhere holds the xmin horizon back, they cannot even be marked dead, and a claim from the
/// front would walk through all of them every time. The check for a higher priority reads, for
/// each kind, the index entries before priority `$5`: one descent when there are none, and
/// otherwise, up to the first one that is ready and due, the entries of that kind's
/// higher-priority jobs claimed since the last vacuum or not due yet (`run_at` cannot narrow a
/// range that starts on `priority`).
pub const CLAIM_JOBS_AFTER: &str = claim_jobs!(
    "\n          AND priority = $5 AND (run_at, id) > ($6, $7)",
    "
    WHERE NOT EXISTS (
        SELECT FROM unnest($2::text[]) AS other(kind)
        WHERE EXISTS (
            SELECT FROM jobs_queue
            WHERE state = 'ready' AND queue = $1 AND kind = other.kind AND priority > $5
              AND run_at <= now()))"
);

/// A claim of ready jobs of the one kind `$2[1]` from queue `$1`, with the parameters and rows
/// of [`claim_jobs!`] and `$where` narrowing the scan: the ready index's `(queue, kind, ...)`
/// prefix read directly, without the per-kind join, which PostgreSQL plans in a fraction of
/// the time (a worker of one kind claims after each job when idle, so this is most of its
/// pickup latency).
macro_rules! claim_one_kind {
    ($where:literal) => {
        concat!(
            "
WITH claimable AS (
    SELECT id FROM jobs_queue
    WHERE state = 'ready' AND queue = $1 AND kind = ($2::text[])[1] AND run_at <= now()
      AND (SELECT set_config('synchronous_commit', 'off', true)) = 'off'",
            $where,
            "
    ORDER BY priority DESC, run_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
",
            claimed_jobs!("($4::float8[])[1]")
        )
    };
}

/// [`CLAIM_JOBS`] for a worker that claims one kind: `$2` and `$4` hold one element each.
pub const CLAIM_ONE_KIND: &str = claim_one_kind!("");

/// [`CLAIM_JOBS_AFTER`] for a worker that claims one kind: `$2` and `$4` hold one element each.
/// The check for a ready job of a higher priority is one index probe, evaluated once.
pub const CLAIM_ONE_KIND_AFTER: &str = claim_one_kind!(
    "
      AND priority = $5 AND (run_at, id) > ($6, $7)
      AND NOT EXISTS (
          SELECT FROM jobs_queue AS higher
          WHERE higher.state = 'ready' AND higher.queue = $1 AND higher.kind = ($2::text[])[1]
            AND higher.priority > $5 AND higher.run_at <= now())"
);

/// Records the outcomes of many runs in one statement, each fenced by its lease token.
///
/// Arrays, one element per run: `$1` ids, `$2` lease tokens, `$3` new states (`done`, `ready`,
/// `dead`, `cancelled`), `$4` seconds until the job is ready again (for `ready`), `$5` whether
/// the attempt is given back (snooze, hand-back at shutdown), `$6` error kinds and `$7` error
/// messages (NULL when there is no error to keep). Returns the `(id, lease_token)` of the runs
/// whose lease still held (a worker may hold two runs of one job, the stale one under a lost
/// token): the others were taken by another worker or a rescue, and nothing was written for them. A job of a
/// schedule that is now done records the schedule's success.
pub const RECORD_OUTCOMES: &str = "
WITH recorded AS (
UPDATE jobs_queue AS j
SET state = o.state,
    run_at = CASE WHEN o.state = 'ready' THEN now() + make_interval(secs => o.delay_secs) ELSE j.run_at END,
    attempts = CASE WHEN o.give_back_attempt THEN j.attempts - 1 ELSE j.attempts END,
    finished_at = CASE WHEN o.state = 'ready' THEN NULL ELSE now() END,
    lease_token = NULL,
    lease_expires_at = NULL,
    errors = CASE WHEN o.error_kind IS NULL THEN j.errors
                  ELSE j.errors || jsonb_build_array(jsonb_build_object(
                      'attempt', j.attempts, 'at', now(), 'kind', o.error_kind, 'error', o.error))
             END
FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::float8[], $5::bool[], $6::text[], $7::text[])
     AS o(id, lease_token, state, delay_secs, give_back_attempt, error_kind, error)
WHERE j.id = o.id AND j.lease_token = o.lease_token
RETURNING j.id, o.lease_token, j.state, j.schedule
), schedule_succeeded AS (
    UPDATE jobs_schedules AS s SET last_success_at = now()
    WHERE s.name IN (SELECT schedule FROM recorded WHERE state = 'done' AND schedule IS NOT NULL)
)
SELECT id, lease_token FROM recorded";

/// The advisory lock key that serializes the claims of kind `$1`, which has a limit on its
/// running jobs (see [`CLAIM_LIMITED_JOBS`]).
pub const LOCK_LIMITED_KIND: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('jobs_max_running:' || $1, 0))";

/// Claims up to `$3` ready jobs of kind `$1` from queues `$2`, but no more than leave at most
/// `$4` jobs of the kind running across all workers, each leased for `$5` seconds. Run after
/// [`LOCK_LIMITED_KIND`] in the same transaction, so that the count of running jobs is taken
/// after any other claim of the kind has committed. Returns what [`CLAIM_JOBS`] returns.
///
/// Each queue is scanned apart through the ready index's `(queue, kind, ...)` prefix, as
/// [`CLAIM_JOBS`] scans each kind, so jobs of other kinds cost nothing; the running jobs are
/// counted through the index of running jobs (`jobs_queue_leases`), whose size is bounded by the
/// slots of all workers, not by the backlog. The limit `$3` bounds the rows the planner expects,
/// so that the update finds the claimed rows by id rather than hashing the table.
pub const CLAIM_LIMITED_JOBS: &str = concat!(
    "
WITH room AS (
    SELECT greatest(0, least($3, $4 - (
        SELECT count(*) FROM jobs_queue WHERE state = 'running' AND kind = $1))) AS jobs
), claimable AS (
    SELECT id FROM (
        SELECT candidate.id, candidate.priority, candidate.run_at
        FROM unnest($2::text[]) AS claimed(queue)
        CROSS JOIN LATERAL (
            SELECT id, priority, run_at FROM jobs_queue
            WHERE state = 'ready' AND queue = claimed.queue AND kind = $1 AND run_at <= now()
            ORDER BY priority DESC, run_at, id
            LIMIT (SELECT jobs FROM room)
            FOR UPDATE SKIP LOCKED
        ) AS candidate
        ORDER BY candidate.priority DESC, candidate.run_at, candidate.id
        LIMIT $3
    ) AS first
    ORDER BY priority DESC, run_at, id
    LIMIT (SELECT jobs FROM room)
)
",
    claimed_jobs!("$5")
);

/// Extends the leases of jobs `$1` still held with tokens `$2`, each by its `$3` seconds (the
/// three arrays pair up); returns the `(id, lease_token)` of the runs whose lease still holds.
pub const HEARTBEAT: &str = "
UPDATE jobs_queue AS j
SET lease_expires_at = now() + make_interval(secs => held.lease_secs)
FROM unnest($1::bigint[], $2::uuid[], $3::float8[]) AS held(id, lease_token, lease_secs)
WHERE j.id = held.id AND j.lease_token = held.lease_token
RETURNING j.id, j.lease_token";

/// Marks job `$1` done inside the job's own transaction, fenced by its lease token `$2`; returns
/// its id when the lease still held. The row stays locked until that transaction ends, so the
/// completion commits or rolls back with the job's effects.
pub const COMPLETE_IN_TRANSACTION: &str = "
WITH completed AS (
    UPDATE jobs_queue
    SET state = 'done',
        finished_at = now(),
        lease_token = NULL,
        lease_expires_at = NULL
    WHERE id = $1 AND lease_token = $2 AND state = 'running'
    RETURNING id, schedule
), schedule_succeeded AS (
    UPDATE jobs_schedules AS s SET last_success_at = now()
    WHERE s.name IN (SELECT schedule FROM completed WHERE schedule IS NOT NULL)
)
SELECT id FROM completed";

/// The rescue of expired leases, for the rows that `$selection` picks among the running jobs
/// whose lease expired (see [`RESCUE_EXPIRED`] and [`RESCUE_JOBS`]).
macro_rules! rescue_jobs {
    ($selection:literal) => {
        concat!(
            "
WITH expired AS (
    SELECT id FROM jobs_queue
    WHERE state = 'running' AND lease_expires_at < now()",
            $selection,
            "
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs_queue AS j
SET state = CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'ready' END,
    finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
    lease_token = NULL,
    lease_expires_at = NULL,
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempts, 'at', now(), 'kind', 'lease_expired',
        'error', 'lease expired: the worker stopped renewing it (crashed, paused or cut off)'))
FROM expired
WHERE j.id = expired.id
RETURNING j.id, j.kind, j.queue, j.state"
        )
    };
}

/// Returns up to `$1` jobs whose lease expired to ready, or to dead when their attempts are used
/// up, recording the expiry as that attempt's error; skips the jobs `$2` (rows this worker set
/// aside after the database refused to rescue them). A rescued job keeps its `run_at`, so it goes
/// before the jobs that became ready after it.
pub const RESCUE_EXPIRED: &str = rescue_jobs!(
    "
      AND id <> ALL($2)
    ORDER BY lease_expires_at
    LIMIT $1"
);

/// The jobs [`RESCUE_EXPIRED`] would take (up to `$1`, skipping `$2`), without taking them: what
/// a rescue the database refused goes through one row at a time. Returns id, kind and queue.
pub const LIST_EXPIRED: &str = "
SELECT id, kind, queue FROM jobs_queue
WHERE state = 'running' AND lease_expires_at < now() AND id <> ALL($2)
ORDER BY lease_expires_at
LIMIT $1";

/// Rescues the jobs `$1` as [`RESCUE_EXPIRED`] does, those whose lease is still expired and that
/// no other rescue holds; returns what it returns.
pub const RESCUE_JOBS: &str = rescue_jobs!(
    "
      AND id = ANY($1)"
);

// ---------------------------------------------------------------------------------------------
// Operating the queue: health numbers, dead letters, retention (see `crate::admin`).
// ---------------------------------------------------------------------------------------------

/// The extended statistics object (migration 2) whose sample of `(queue, kind, state)`
/// combinations gives the done and cancelled estimates of [`QUEUE_STATS`].
pub const STATE_MIX_STATISTICS: &str = "jobs_queue_state_mix";

/// The text of [`QUEUE_STATS`], to be read alone or stored by [`SHARED_QUEUE_STATS`].
macro_rules! queue_stats {
    () => {
        "
WITH live AS (
    SELECT queue, kind,
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
    SELECT queue, kind, 0, 0, count(*), count(*) FILTER (WHERE lease_expires_at < now()), 0,
           NULL, min(lease_expires_at) FILTER (WHERE lease_expires_at < now())
    FROM jobs_queue WHERE state = 'running'
    GROUP BY queue, kind
    UNION ALL
    SELECT queue, kind, 0, 0, 0, 0, count(*), NULL, NULL
    FROM jobs_queue WHERE state = 'dead'
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
        SELECT queue, kind, ready, scheduled, running, expired_leases, dead,
               0::bigint AS done, 0::bigint AS cancelled, oldest_ready_at, oldest_expired_lease_at
        FROM live
        UNION ALL
        SELECT queue, kind, 0, 0, 0, 0, 0,
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
/// Live states are counted exactly, each through its own partial index (`jobs_queue_ready`,
/// `jobs_queue_leases`, `jobs_queue_dead`), so the cost follows the live rows, never the
/// retained ones. Done and cancelled rows are not counted: their numbers are estimates, the
/// frequency of each combination in the planner's sample (the `jobs_queue_state_mix`
/// statistics, gathered by `ANALYZE` and autovacuum) times the table's estimated row count.
/// `pg_stats_ext` shows that sample only to the table's owner (and members of its role).
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
         queue text, kind text, ready bigint, scheduled bigint, running bigint,
         expired_leases bigint, dead bigint, done bigint, cancelled bigint,
         oldest_ready_secs float8, longest_expired_lease_secs float8)) WITH ORDINALITY AS stats
ORDER BY stats.ordinality"
);

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
/// UTC.
pub const JOB_DETAILS: &str = "
SELECT id, kind, queue, state, priority, attempts, max_attempts, payload, dedupe_key,
       dedupe_scope, errors,
       to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS created_at,
       to_char(run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS run_at,
       to_char(attempted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
           AS attempted_at,
       to_char(finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
           AS finished_at
FROM jobs_queue
WHERE id = $1";

/// The ready or running job holding the `active` dedupe key of dead job `c`, if any: a probe of
/// the active dedupe index by key digest, shared by [`REPLAY_DEAD`] and [`PREVIEW_REPLAY_DEAD`]
/// so that a preview foretells the replay.
macro_rules! active_key_holder {
    () => {
        concat!(
            "(SELECT holder.id FROM jobs_queue AS holder
                WHERE holder.kind = c.kind AND ",
            dedupe_digest!("holder.dedupe_key"),
            " = ",
            dedupe_digest!("c.dedupe_key"),
            "
                  AND holder.dedupe_key = c.dedupe_key
                  AND holder.dedupe_scope = 'active' AND holder.state IN ('ready', 'running')
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
    SELECT id, kind, queue, dedupe_key, dedupe_scope
    FROM jobs_queue
    WHERE id > $5 AND ",
    dead_jobs_matching!(),
    "
    ORDER BY id
    LIMIT $6
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
    RETURNING j.id, j.queue
), notified AS (
    SELECT pg_notify('jobs_queue', queue) FROM (SELECT DISTINCT queue FROM replayed) AS queues
)
SELECT checked.id, checked.kind, checked.queue, checked.dedupe_key, checked.held_by,
       (SELECT count(*) FROM notified) AS notified
FROM checked
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
    SELECT id, kind, queue, dedupe_key, dedupe_scope
    FROM jobs_queue
    WHERE id > $5 AND ",
    dead_jobs_matching!(),
    "
    ORDER BY id
    LIMIT $6
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

/// Advisory lock key that lets one process prune at a time (`"jobs_ret"` as bytes).
pub const RETENTION_LOCK_KEY: i64 = 0x6a6f_6273_5f72_6574;

/// Deletes up to `$2` done and cancelled jobs finished more than `$1` seconds ago, oldest
/// first, if this statement gets the retention lock `$3`; dead jobs are never touched.
///
/// One statement, its own transaction: the lock is taken with `pg_try_advisory_xact_lock`
/// first and released at commit, so only one process deletes at a time and none waits.
/// Returns whether the lock was had, and how many done and cancelled jobs were deleted.
pub const PRUNE_FINISHED: &str = "
WITH retention_lock AS (
    SELECT pg_try_advisory_xact_lock($3) AS held
), deleted AS (
    DELETE FROM jobs_queue
    WHERE (SELECT held FROM retention_lock)
      AND id IN (
        SELECT id FROM jobs_queue
        WHERE state IN ('done', 'cancelled')
          AND finished_at < now() - make_interval(secs => $1)
        ORDER BY finished_at
        LIMIT $2)
    RETURNING state
)
SELECT (SELECT held FROM retention_lock) AS locked,
       count(*) FILTER (WHERE state = 'done') AS done,
       count(*) FILTER (WHERE state = 'cancelled') AS cancelled
FROM deleted";

/// Deletes up to `$2` outbox rows published more than `$1` seconds ago, oldest first, if this
/// statement gets the retention lock `$3`; pending and parked rows are never touched. Returns
/// whether the lock was had, and how many rows were deleted.
pub const PRUNE_PUBLISHED_OUTBOX: &str = "
WITH retention_lock AS (
    SELECT pg_try_advisory_xact_lock($3) AS held
), deleted AS (
    DELETE FROM jobs_outbox
    WHERE (SELECT held FROM retention_lock)
      AND id IN (
        SELECT id FROM jobs_outbox
        WHERE state = 'published'
          AND published_at < now() - make_interval(secs => $1)
        ORDER BY published_at
        LIMIT $2)
    RETURNING 1
)
SELECT (SELECT held FROM retention_lock) AS locked, count(*) AS deleted FROM deleted";

/// What retention would delete now, changing nothing: done and cancelled jobs finished more than
/// `$1` seconds ago, expired processed keys, and outbox rows published more than `$1` seconds ago
/// (the selections of [`PRUNE_FINISHED`], [`PRUNE_PROCESSED_KEYS`] and
/// [`PRUNE_PUBLISHED_OUTBOX`], without their batch limits).
pub const COUNT_PRUNABLE: &str = "
SELECT (SELECT count(*) FROM jobs_queue
        WHERE state = 'done' AND finished_at < now() - make_interval(secs => $1)) AS done,
       (SELECT count(*) FROM jobs_queue
        WHERE state = 'cancelled' AND finished_at < now() - make_interval(secs => $1))
           AS cancelled,
       (SELECT count(*) FROM jobs_processed_keys WHERE expires_at <= now()) AS processed_keys,
       (SELECT count(*) FROM jobs_outbox
        WHERE state = 'published' AND published_at < now() - make_interval(secs => $1))
           AS outbox";

/// Records processed key `$1`, to expire `$2` seconds from now (never when `NULL`), unless it is
/// already recorded and unexpired; returns a row only when this statement recorded it. A key
/// recorded by a transaction still open makes this statement wait for that transaction: it then
/// counts as recorded if that transaction committed, and is recorded here if it rolled back.
/// Keys are told apart by their digest (the table's primary key), as dedupe keys are.
pub const MARK_PROCESSED: &str = "
INSERT INTO jobs_processed_keys AS k (key, expires_at)
VALUES ($1, now() + make_interval(secs => $2))
ON CONFLICT (key_digest) DO UPDATE
    SET processed_at = now(), expires_at = EXCLUDED.expires_at
    WHERE k.expires_at IS NOT NULL AND k.expires_at <= now()
RETURNING true";

/// Whether processed key `$1` is recorded and unexpired.
pub const IS_PROCESSED: &str = concat!(
    "
SELECT EXISTS (
    SELECT 1 FROM jobs_processed_keys
    WHERE key_digest = ",
    dedupe_digest!("$1::text"),
    " AND (expires_at IS NULL OR expires_at > now()))"
);

/// Deletes up to `$1` expired processed keys, if this statement gets the retention lock `$2`.
/// Returns whether the lock was had, and how many keys were deleted.
pub const PRUNE_PROCESSED_KEYS: &str = "
WITH retention_lock AS (
    SELECT pg_try_advisory_xact_lock($2) AS held
), deleted AS (
    DELETE FROM jobs_processed_keys
    WHERE (SELECT held FROM retention_lock)
      AND key_digest IN (
        SELECT key_digest FROM jobs_processed_keys
        WHERE expires_at <= now()
        ORDER BY expires_at
        LIMIT $1)
    RETURNING 1
)
SELECT (SELECT held FROM retention_lock) AS locked, count(*) AS deleted FROM deleted";

/// Registers schedule `$1` (kind `$2`, queue `$3`, description `$4`, missed-ticks policy `$5`),
/// or updates its settings; a new schedule's first tick is the first after now. Ticks already
/// dealt with are kept.
pub const UPSERT_SCHEDULE: &str = "
INSERT INTO jobs_schedules (name, kind, queue, description, missed, last_tick_at)
VALUES ($1, $2, $3, $4, $5, now())
ON CONFLICT (name) DO UPDATE
SET kind = EXCLUDED.kind, queue = EXCLUDED.queue, description = EXCLUDED.description,
    missed = EXCLUDED.missed, updated_at = now()
WHERE (jobs_schedules.kind, jobs_schedules.queue, jobs_schedules.description, jobs_schedules.missed)
      IS DISTINCT FROM (EXCLUDED.kind, EXCLUDED.queue, EXCLUDED.description, EXCLUDED.missed)";

/// Registers schedule `$1` again (kind `$2`, queue `$3`, description `$4`, missed-ticks policy
/// `$5`) when its row was removed while a worker still declares it, with every tick up to `$6`
/// (the last this worker saw dealt with; now when NULL) counted as dealt with, so that the ticks
/// since follow the missed-ticks policy. A row registered meanwhile by another process is kept.
pub const REREGISTER_SCHEDULE: &str = "
INSERT INTO jobs_schedules (name, kind, queue, description, missed, last_tick_at)
VALUES ($1, $2, $3, $4, $5, coalesce($6, now()))
ON CONFLICT (name) DO NOTHING";

/// Locks schedule `$1` for a scheduling pass (waiting for a pass of another process to end) and
/// returns the last tick dealt with and the database's clock.
pub const LOCK_SCHEDULE: &str = "
SELECT last_tick_at, now() AS now FROM jobs_schedules WHERE name = $1 FOR UPDATE";

/// Enqueues the ticks `$6` (timestamps) of schedule `$1` as jobs of kind `$2` in queue `$3` with
/// priority `$4` and max attempts `$5`, one per tick: each runs at its tick, with the dedupe key
/// `<schedule>@<tick>` (retained), so a tick already enqueued is skipped. Announces the queue.
/// Returns how many jobs were inserted.
pub const INSERT_SCHEDULED_JOBS: &str = "
WITH inserted AS (
    INSERT INTO jobs_queue (kind, queue, payload, priority, max_attempts, run_at, dedupe_key,
                            dedupe_scope, schedule)
    SELECT $2, $3, '{}'::jsonb, $4, $5, tick,
           $1 || '@' || to_char(tick AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'),
           'retained', $1
    FROM unnest($6::timestamptz[]) AS tick
    ON CONFLICT DO NOTHING
    RETURNING queue
), notified AS (
    SELECT pg_notify('jobs_queue', queue) FROM (SELECT DISTINCT queue FROM inserted) AS queues
)
SELECT count(*) AS inserted, (SELECT count(*) FROM notified) AS notified FROM inserted";

/// Records that every tick of schedule `$1` up to `$2` was dealt with.
pub const ADVANCE_SCHEDULE: &str = "
UPDATE jobs_schedules SET last_tick_at = $2 WHERE name = $1 AND last_tick_at < $2";

/// Every schedule with its bookkeeping and the database's clock, by name.
pub const LIST_SCHEDULES: &str = "
SELECT name, kind, queue, description, missed, created_at, last_tick_at, last_success_at,
       now() AS now
FROM jobs_schedules ORDER BY name";

/// Locks schedule `$1` for its removal; returns its kind, description, last tick dealt with and
/// the database's clock.
pub const LOCK_SCHEDULE_FOR_REMOVAL: &str = "
SELECT kind, description, last_tick_at, now() AS now FROM jobs_schedules WHERE name = $1
FOR UPDATE";

/// Removes schedule `$1`; returns its name when it existed. Its jobs stay.
pub const REMOVE_SCHEDULE: &str = "DELETE FROM jobs_schedules WHERE name = $1 RETURNING name";

// ---------------------------------------------------------------------------------------------
// The transactional outbox: events written in the caller's transaction, published by a relay
// (see `crate::outbox`).
// ---------------------------------------------------------------------------------------------

/// Writes one outbox row: `$1` topic, `$2` payload. Returns its id.
pub const INSERT_OUTBOX: &str =
    "INSERT INTO jobs_outbox (topic, payload) VALUES ($1, $2) RETURNING id";

/// Claims up to `$1` due pending outbox rows, by id, locking them (`FOR UPDATE SKIP LOCKED`) for
/// the relay's transaction. Run in that transaction, which publishes them and records the
/// outcomes before it commits.
///
/// A row whose topic has an earlier pending row still backing off is not claimed (rows back off
/// only after a failed attempt: the `jobs_outbox_retrying` index holds just those). Each claimed
/// row comes back with `held_back`: true when an earlier pending row of its topic is outside
/// this claim (held by another relay, or not yet due), found once per topic as its first
/// pending row outside the claim: such a row must not be published in this batch, or its
/// topic's order would break. Rows come back by id, with their message id and the attempts
/// made so far.
pub const CLAIM_OUTBOX: &str = "
WITH claimed AS (
    SELECT o.id, o.message_id, o.topic, o.payload, o.attempts, o.created_at
    FROM jobs_outbox AS o
    WHERE o.state = 'pending' AND o.next_attempt_at <= now()
      AND NOT EXISTS (
          SELECT 1 FROM jobs_outbox AS earlier
          WHERE earlier.state = 'pending' AND earlier.attempts > 0
            AND earlier.topic = o.topic AND earlier.id < o.id
            AND earlier.next_attempt_at > now())
    ORDER BY o.id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), topics AS MATERIALIZED (
    SELECT t.topic,
           (SELECT earlier.id FROM jobs_outbox AS earlier
            WHERE earlier.state = 'pending' AND earlier.topic = t.topic
              AND earlier.id NOT IN (SELECT id FROM claimed)
            ORDER BY earlier.id
            LIMIT 1) AS first_unclaimed
    FROM (SELECT DISTINCT topic FROM claimed) AS t
)
SELECT c.id, c.message_id, c.topic, c.payload::text AS payload, c.attempts,
       extract(epoch FROM c.created_at)::float8 AS created_epoch,
       coalesce(topics.first_unclaimed < c.id, false) AS held_back
FROM claimed AS c JOIN topics ON topics.topic = c.topic
ORDER BY c.id";

/// Records what a relay's batch did, one element per row attempted: `$1` ids, `$2` new states
/// (`published`, `pending` to retry, `parked`), `$3` seconds until a retried row is due again,
/// `$4` errors (NULL after a success), `$5` whether the row draws a new message id (parked
/// because the broker holds another message under its id: a replay then publishes under the new
/// one instead of being dropped again). Each row's attempts grow by one; an error replaces its
/// last error. Only pending rows are written. Returns how many rows were written.
pub const RECORD_OUTBOX_OUTCOMES: &str = "
WITH recorded AS (
    UPDATE jobs_outbox AS o
    SET state = r.state,
        message_id = CASE WHEN r.new_message_id THEN gen_random_uuid() ELSE o.message_id END,
        attempts = o.attempts + 1,
        last_error = coalesce(r.error, o.last_error),
        next_attempt_at = CASE WHEN r.state = 'pending'
                               THEN statement_timestamp() + make_interval(secs => r.delay_secs)
                               ELSE o.next_attempt_at END,
        published_at = CASE WHEN r.state = 'published' THEN statement_timestamp() END,
        parked_at = CASE WHEN r.state = 'parked' THEN statement_timestamp() END
    FROM unnest($1::bigint[], $2::text[], $3::float8[], $4::text[], $5::bool[])
         AS r(id, state, delay_secs, error, new_message_id)
    WHERE o.id = r.id AND o.state = 'pending'
    RETURNING 1
)
SELECT count(*) FROM recorded";

/// Counts parked outbox rows.
pub const COUNT_PARKED: &str = "SELECT count(*) FROM jobs_outbox WHERE state = 'parked'";

/// Lists up to `$2` parked outbox rows of topic `$3` (NULL for any) with an id above `$1`, by
/// id.
pub const LIST_PARKED: &str = "
SELECT id, topic, payload, attempts, last_error,
       extract(epoch FROM now() - created_at)::float8 AS age_secs,
       extract(epoch FROM now() - parked_at)::float8 AS parked_for_secs
FROM jobs_outbox
WHERE state = 'parked' AND id > $1 AND ($3::text IS NULL OR topic = $3)
ORDER BY id
LIMIT $2";

/// The condition selecting the parked outbox rows a replay takes, shared by [`REPLAY_PARKED`]
/// and [`PREVIEW_REPLAY_PARKED`]: ids `$1` (NULL for every parked row), above `$2`, with a valid
/// topic (a row written before topics were checked stays parked: see [`REPLAY_PARKED`]).
macro_rules! parked_rows_matching {
    () => {
        "state = 'parked' AND id > $2 AND ($1::bigint[] IS NULL OR id = ANY($1))
      AND jobs_outbox_topic_is_valid(topic)"
    };
}

/// Makes up to `$3` parked outbox rows with an id above `$2` pending again, by id: those of ids
/// `$1` (NULL for every parked row), due at once with their attempts reset to 0 and their last
/// error kept. A row whose topic is not valid (written before topics were checked) stays
/// parked: it could never be published, and the table refuses it as pending. Returns the ids
/// made pending.
pub const REPLAY_PARKED: &str = concat!(
    "
WITH candidates AS (
    SELECT id FROM jobs_outbox
    WHERE ",
    parked_rows_matching!(),
    "
    ORDER BY id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs_outbox AS o
SET state = 'pending', attempts = 0, next_attempt_at = now(), parked_at = NULL
FROM candidates
WHERE o.id = candidates.id
RETURNING o.id"
);

/// What [`REPLAY_PARKED`] would make pending, changing nothing: up to `$3` parked rows with an
/// id above `$2`, by id, those of ids `$1` (NULL for every parked row).
pub const PREVIEW_REPLAY_PARKED: &str = concat!(
    "SELECT id FROM jobs_outbox WHERE ",
    parked_rows_matching!(),
    " ORDER BY id LIMIT $3"
);
