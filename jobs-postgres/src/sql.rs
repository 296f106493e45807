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

/// Versions and names already applied.
pub const APPLIED_MIGRATIONS: &str = "SELECT version, name FROM jobs_migrations ORDER BY version";

/// Records one applied migration.
pub const RECORD_MIGRATION: &str = "INSERT INTO jobs_migrations (version, name) VALUES ($1, $2)";

/// The single-job insert, with or without skipping dedupe conflicts.
macro_rules! insert_job {
    ($on_conflict:literal) => {
        concat!(
            "
WITH inserted AS (
    INSERT INTO jobs_queue (kind, queue, payload, priority, max_attempts, run_at, dedupe_key, dedupe_scope)
    VALUES ($1, $2, $3, $4, $5,
            COALESCE(to_timestamp($6), now() + make_interval(secs => $7)),
            $8, $9)
    ",
            $on_conflict,
            "
    RETURNING id, queue, run_at <= now() AS ready
), notified AS (
    SELECT pg_notify('jobs_queue', queue) FROM inserted WHERE ready
)
SELECT id, (SELECT count(*) FROM notified) AS notified FROM inserted"
        )
    };
}

/// Inserts one job without a dedupe key.
///
/// `$1` kind, `$2` queue, `$3` payload, `$4` priority, `$5` max attempts, `$6` run-at as epoch
/// seconds (or NULL), `$7` delay in seconds, `$8` dedupe key and `$9` dedupe scope (both NULL
/// here). Returns the new id. Announces the queue when the job is ready at once.
pub const INSERT_JOB: &str = insert_job!("");

/// Inserts one job with a dedupe key, or nothing when the key is held: the parameters of
/// [`INSERT_JOB`]; no row comes back on a conflict. Skipping conflicts costs a speculative
/// insertion per row, which is why keyless jobs use [`INSERT_JOB`].
pub const INSERT_DEDUPED_JOB: &str = insert_job!("ON CONFLICT DO NOTHING");

/// The bulk insert, with or without skipping dedupe conflicts.
macro_rules! insert_jobs {
    ($on_conflict:literal) => {
        concat!(
            "
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::smallint[], $5::integer[],
                         $6::float8[], $7::float8[], $8::text[], $9::text[])
        WITH ORDINALITY AS input(kind, queue, payload, priority, max_attempts, run_at_epoch,
                                 delay_secs, dedupe_key, dedupe_scope, position)
), inserted AS (
    INSERT INTO jobs_queue (kind, queue, payload, priority, max_attempts, run_at, dedupe_key, dedupe_scope)
    SELECT kind, queue, payload, priority, max_attempts,
           COALESCE(to_timestamp(run_at_epoch), now() + make_interval(secs => delay_secs)),
           dedupe_key, dedupe_scope
    FROM input ORDER BY position
    ",
            $on_conflict,
            "
    RETURNING id, kind, queue, dedupe_key, run_at <= now() AS ready
), notified AS (
    SELECT pg_notify('jobs_queue', queue) FROM (SELECT DISTINCT queue FROM inserted WHERE ready) AS queues
)
SELECT coalesce(array_agg(id ORDER BY id), '{}') AS ids,
       coalesce(array_agg(kind ORDER BY id), '{}') AS kinds,
       coalesce(array_agg(dedupe_key ORDER BY id), '{}') AS dedupe_keys,
       (SELECT count(*) FROM notified) AS notified
FROM inserted"
        )
    };
}

/// Inserts many jobs without dedupe keys in one statement, rows in input order.
///
/// Arrays: `$1` kinds, `$2` queues, `$3` payloads, `$4` priorities, `$5` max attempts, `$6`
/// run-at epoch seconds (NULL for none), `$7` delays in seconds, `$8` dedupe keys, `$9` scopes.
/// Returns one row of arrays: the ids, kinds and dedupe keys of the inserted rows, by id (ids grow
/// in input order). Announces each queue that got ready work once.
pub const INSERT_JOBS: &str = insert_jobs!("");

/// Inserts many jobs, some with dedupe keys, skipping rows whose key is held (also by an
/// earlier row of the same call): the parameters and rows of [`INSERT_JOBS`].
pub const INSERT_DEDUPED_JOBS: &str = insert_jobs!("ON CONFLICT DO NOTHING");

/// Finds the jobs holding dedupe keys: `$1` kinds, `$2` keys (pairwise).
pub const FIND_DEDUPE_HOLDERS: &str = "
SELECT j.id, j.kind, j.dedupe_key
FROM jobs_queue j
JOIN unnest($1::text[], $2::text[]) AS wanted(kind, dedupe_key)
  ON j.kind = wanted.kind AND j.dedupe_key = wanted.dedupe_key
WHERE j.dedupe_scope = 'retained' OR j.state IN ('ready', 'running')";

/// Claims up to `$3` ready jobs of kinds `$2` from queue `$1`, leasing them for `$4` seconds,
/// by priority (higher first), then `run_at`, then id.
pub const CLAIM_JOBS: &str = "
WITH claimable AS (
    SELECT id FROM jobs_queue
    WHERE state = 'ready' AND queue = $1 AND kind = ANY($2) AND run_at <= now()
    ORDER BY priority DESC, run_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs_queue AS j
SET state = 'running',
    attempts = j.attempts + 1,
    lease_token = gen_random_uuid(),
    lease_expires_at = now() + make_interval(secs => $4),
    attempted_at = now()
FROM claimable
WHERE j.id = claimable.id
RETURNING j.id, j.kind, j.queue, j.payload::text AS payload, j.attempts, j.max_attempts,
          j.dedupe_key, j.lease_token";

/// Records the outcomes of many runs in one statement, each fenced by its lease token.
///
/// Arrays, one element per run: `$1` ids, `$2` lease tokens, `$3` new states (`done`, `ready`,
/// `dead`, `cancelled`), `$4` seconds until the job is ready again (for `ready`), `$5` whether
/// the attempt is given back (snooze, hand-back at shutdown), `$6` error kinds and `$7` error
/// messages (NULL when there is no error to keep). Returns the ids whose lease still held: the
/// others were taken by another worker or a rescue, and nothing was written for them.
pub const RECORD_OUTCOMES: &str = "
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
RETURNING j.id";

/// Extends by `$3` seconds the leases of jobs `$1` still held with tokens `$2` (pairwise);
/// returns the ids whose lease still holds.
pub const HEARTBEAT: &str = "
UPDATE jobs_queue AS j
SET lease_expires_at = now() + make_interval(secs => $3)
FROM unnest($1::bigint[], $2::uuid[]) AS held(id, lease_token)
WHERE j.id = held.id AND j.lease_token = held.lease_token
RETURNING j.id";

/// Returns up to `$1` jobs whose lease expired to ready, or to dead when their attempts are used
/// up, recording the expiry as that attempt's error.
pub const RESCUE_EXPIRED: &str = "
WITH expired AS (
    SELECT id FROM jobs_queue
    WHERE state = 'running' AND lease_expires_at < now()
    ORDER BY lease_expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs_queue AS j
SET state = CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'ready' END,
    finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
    run_at = now(),
    lease_token = NULL,
    lease_expires_at = NULL,
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempts, 'at', now(), 'kind', 'lease_expired',
        'error', 'lease expired: the worker stopped renewing it (crashed, paused or cut off)'))
FROM expired
WHERE j.id = expired.id
RETURNING j.id, j.kind, j.state";
