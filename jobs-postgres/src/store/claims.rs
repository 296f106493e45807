//! Claiming ready jobs: by kind, resuming after a place in the claim order, and for kinds with a
//! limit on their running jobs.

use std::cmp::Reverse;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use jobs_core::{JobId, RateLimit};
use sqlx::{FromRow, PgConnection, Row};
use uuid::Uuid;

use super::transactions;

/// A condition that queue `$queue` (an SQL expression) is not paused: one probe of the primary
/// key of `jobs_queue_pauses`, evaluated once per statement when `$queue` is a parameter. Every
/// claim checks it, so a pause stops claims from its next one on, in every worker process.
macro_rules! queue_not_paused {
    ($queue:literal) => {
        concat!(
            "NOT EXISTS (SELECT FROM jobs_queue_pauses AS paused WHERE paused.queue = ",
            $queue,
            ")"
        )
    };
}

/// The id of a due job of kind `$kind` (an SQL expression) and of a higher priority than
/// `$priority` (an SQL parameter, `$6` unless given) that is ready in queue `$queue` (`$1` unless
/// given), or null when there is none: the first such job in the ready
/// index's order. Read in that order, the probe is one descent of the index in every plan,
/// where an `EXISTS` could be planned without the parameters' values as a walk of the table
/// that expects to meet such a job soon.
macro_rules! first_higher_priority_job {
    ($kind:literal) => {
        first_higher_priority_job!($kind, "$1", "$6")
    };
    ($kind:literal, $queue:literal, $priority:literal) => {
        concat!(
            "(SELECT higher.id FROM jobs_queue AS higher
          WHERE higher.state = 'ready' AND higher.queue = ",
            $queue,
            " AND higher.kind = ",
            $kind,
            "
            AND higher.priority > (SELECT ",
            $priority,
            "::smallint) AND higher.run_at <= now()
          ORDER BY higher.priority DESC, higher.run_at, higher.id
          LIMIT 1)"
        )
    };
}

/// The end every claim shares: each row of `claimable` becomes `running`, counts the attempt,
/// and takes a fresh lease token and a lease of `$lease` seconds (an SQL expression), all from
/// the time `$now` (an SQL expression); returns each claimed job with its place in the claim
/// order and the seconds it had been due.
///
/// Every claim is planned once per connection, not at each execution: its limit is read
/// through a scalar subquery (`LIMIT (SELECT $3::bigint)`), so that no plan depends on the
/// number of jobs asked for, and PostgreSQL keeps the generic plan after its five comparison
/// runs (planning a claim one-off cost more than running it). A generic plan expects the limit
/// to let a tenth of the ready jobs through; the claimed rows are therefore found by their
/// primary key from the array of their ids, a plan that stays right whatever the planner
/// expects, where a join with `claimable` would be planned, for such numbers, as a walk of the
/// whole primary key.
macro_rules! claimed_jobs {
    ($lease:literal) => {
        claimed_jobs!($lease, "now()")
    };
    ($lease:literal, $now:literal) => {
        claimed_jobs!($lease, $now, "")
    };
    ($lease:literal, $now:literal, $more_returned:expr) => {
        concat!(
            "
UPDATE jobs_queue AS j
SET state = 'running',
    attempts = j.attempts + 1,
    lease_token = gen_random_uuid(),
    lease_expires_at = ",
            $now,
            " + make_interval(secs => ",
            $lease,
            "),
    attempted_at = ",
            $now,
            "
WHERE j.id = ANY (ARRAY(SELECT id FROM claimable))
RETURNING j.id, j.kind, j.queue, j.payload::text AS payload, j.attempts, j.max_attempts,
          j.dedupe_key, j.lease_token, j.priority, j.run_at, j.created_at,
          extract(epoch FROM ",
            $now,
            " - j.run_at)::float8 AS waited_secs",
            $more_returned
        )
    };
}

/// The jobs a claim takes among `candidates` (its jobs locked, in claim order): the first
/// `$free` (an SQL parameter: the worker's free slots), then, for the jobs claimed ahead of the
/// free slots, those after them up to the first job with no attempt to spare (`spare` false).
/// A job claimed ahead waits in the worker before it runs, and a crash meanwhile spends its
/// attempt: on its last attempt that would make it dead without ever running. The claim takes a
/// prefix of the order, so the next claim, starting where this one ended, skips no job; the
/// job it stopped at stays locked until the claim commits.
///
/// `$order` is the claim order over `candidates` (by default the ready index's), `$columns` the
/// columns of `candidates` that `claimable` keeps (by default the id), and `$and_within` an SQL
/// fragment ` AND place <= ...` bounding how many it takes, when `candidates` may hold more
/// (by default empty).
macro_rules! claimed_prefix {
    ($free:literal) => {
        claimed_prefix!($free, "priority DESC, run_at, id", "id", "")
    };
    ($free:literal, $order:expr, $columns:literal, $and_within:literal) => {
        concat!(
            "
claimable AS (
    SELECT ",
            $columns,
            " FROM (
        SELECT ",
            $columns,
            ", place, bool_and(spare OR place <= (SELECT ",
            $free,
            "::bigint)) OVER (ORDER BY place) AS taken
        FROM (
            SELECT ",
            $columns,
            ", spare, row_number() OVER (ORDER BY ",
            $order,
            ") AS place
            FROM candidates
        ) AS ordered
    ) AS prefix
    WHERE taken",
            $and_within,
            "
)"
        )
    };
}

/// A claim of ready jobs of kinds `$2` from queue `$1`, up to `$3`, by priority (higher first),
/// then `run_at`, then id, with `$where` narrowing each kind's scan and `$guard` deciding once
/// whether to scan at all; each job is leased for the seconds that `$4` gives its kind (`$4`
/// pairs with `$2`); beyond the first `$free` jobs, only those [`claimed_prefix!`] lets through.
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
    ($where:expr, $guard:expr, $free:literal) => {
        concat!(
            "
WITH candidates AS (
    SELECT candidate.id, candidate.priority, candidate.run_at, candidate.spare
    FROM unnest((SELECT $2::text[])) AS claimed(kind)
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at, attempts + 1 < max_attempts AS spare FROM jobs_queue
        WHERE state = 'ready' AND queue = $1 AND kind = claimed.kind AND run_at <= now()
          AND ",
            queue_not_paused!("$1"),
            "
          AND (SELECT set_config('synchronous_commit', 'off', true)) = 'off'",
            $where,
            "
        ORDER BY priority DESC, run_at, id
        LIMIT (SELECT $3::bigint)
        FOR UPDATE SKIP LOCKED
    ) AS candidate",
            $guard,
            "
    ORDER BY candidate.priority DESC, candidate.run_at, candidate.id
    LIMIT (SELECT $3::bigint)
),",
            claimed_prefix!($free),
            "
",
            claimed_jobs!("($4::float8[])[array_position($2::text[], j.kind)]")
        )
    };
}

/// Claims up to `$3` ready jobs of kinds `$2` from queue `$1`, from the front of the claim
/// order: by priority (higher first), then `run_at`, then id; each is leased for the seconds
/// that `$4` gives its kind (`$4` pairs with `$2`). Returns each job with its place in the order
/// (`priority`, `run_at`, `id`) and the seconds it had been due when claimed (`waited_secs`).
/// Claims nothing while queue `$1` is paused (every claim below shares that check). Of the jobs
/// beyond the first `$5` (the free slots; the rest are claimed ahead of them), it takes those
/// before the first on its last attempt ([`claimed_prefix!`]).
pub const CLAIM_JOBS: &str = claim_jobs!("", "", "$5");

/// Claims as [`CLAIM_JOBS`] does, but only jobs of priority `$6` after the place `($7, $8)`
/// (`run_at`, id) in the claim order: where the previous claim of this queue ended; and nothing
/// at all when a due job of a higher priority than `$6` is ready (of kinds `$2` in queue `$1`),
/// so that the caller claims from the front instead. `$5` is as in [`CLAIM_JOBS`].
///
/// The scan starts at that place in the ready index instead of its front. The front is where
/// the index entries of jobs claimed since the last vacuum pile up; while a long transaction
/// elsewhere holds the xmin horizon back, they cannot even be marked dead, and a claim from the
/// front would walk through all of them every time. The check for a higher priority reads, for
/// each kind, the index entries before priority `$6`: one descent when there are none, and
/// otherwise, up to the first one that is ready and due, the entries of that kind's
/// higher-priority jobs claimed since the last vacuum or not due yet (`run_at` cannot narrow a
/// range that starts on `priority`).
pub const CLAIM_JOBS_AFTER: &str = claim_jobs!(
    "\n          AND priority = (SELECT $6::smallint)
          AND (run_at, id) > ((SELECT $7::timestamptz), (SELECT $8::bigint))",
    concat!(
        "
    WHERE NOT EXISTS (
        SELECT FROM unnest((SELECT $2::text[])) AS other(kind)
        WHERE ",
        first_higher_priority_job!("other.kind"),
        " IS NOT NULL)"
    ),
    "$5"
);

/// A claim of ready jobs of the one kind `$2[1]` from queue `$1`, with the parameters and rows
/// of [`claim_jobs!`] and `$where` narrowing the scan: the ready index's `(queue, kind, ...)`
/// prefix read directly, without the per-kind join, which PostgreSQL plans in a fraction of
/// the time (a worker of one kind claims after each job when idle, so this is most of its
/// pickup latency).
macro_rules! claim_one_kind {
    ($where:expr, $free:literal) => {
        concat!(
            "
WITH candidates AS (
    SELECT id, priority, run_at, attempts + 1 < max_attempts AS spare FROM jobs_queue
    WHERE state = 'ready' AND queue = $1 AND kind = ($2::text[])[1] AND run_at <= now()
      AND ",
            queue_not_paused!("$1"),
            "
      AND (SELECT set_config('synchronous_commit', 'off', true)) = 'off'",
            $where,
            "
    ORDER BY priority DESC, run_at, id
    LIMIT (SELECT $3::bigint)
    FOR UPDATE SKIP LOCKED
),",
            claimed_prefix!($free),
            "
",
            claimed_jobs!("($4::float8[])[1]")
        )
    };
}

/// [`CLAIM_JOBS`] for a worker that claims one kind: `$2` and `$4` hold one element each.
pub const CLAIM_ONE_KIND: &str = claim_one_kind!("", "$5");

/// [`CLAIM_JOBS_AFTER`] for a worker that claims one kind: `$2` and `$4` hold one element each.
/// The check for a ready job of a higher priority is one index probe, evaluated once.
pub const CLAIM_ONE_KIND_AFTER: &str = claim_one_kind!(
    concat!(
        "
      AND priority = (SELECT $6::smallint)
      AND (run_at, id) > ((SELECT $7::timestamptz), (SELECT $8::bigint))
      AND ",
        first_higher_priority_job!("($2::text[])[1]"),
        " IS NULL"
    ),
    "$5"
);

/// The ready jobs of kind `$kind` in queue `$queue` (SQL expressions), as a `FROM` item and the
/// start of its `WHERE` clause, for the scans of a key's jobs through a key column's ready index.
macro_rules! ready_of_kind {
    ($queue:literal, $kind:literal) => {
        concat!(
            "jobs_queue
            WHERE state = 'ready' AND queue = ",
            $queue,
            " AND kind = ",
            $kind
        )
    };
}

/// The first due job (by the time `$now`) of kind `$kind` ready in queue `$queue` whose key in
/// column `$column` (`limit_key`) follows `$after` (an SQL expression) in the ring of
/// the keys, locked (`FOR UPDATE SKIP LOCKED`), as a row of `key`, `id` and `spare` (whether it
/// has an attempt to spare): the first job, in the key's claim order (priority, `run_at`, id),
/// of the first key after `$after` in key order, or, past the last key (or when `$after` is
/// null), of the first key. `$guards` adds conditions to both scans. Each scan is one descent of
/// the column's partial ready index (`jobs_queue_ready_limit_key`): the
/// jobs of a key are never walked to find the next key, though a descent passes the entries of
/// the jobs claimed since the last vacuum, those locked by other claims, and those of a key whose
/// ready jobs are all scheduled for later. (Each scan sits in a subquery of its own: PostgreSQL
/// locks no rows directly under a `UNION`.)
macro_rules! first_job_in_ring {
    (
        $column:literal,
        $queue:literal,
        $kind:literal,
        $now:literal,
        $after:literal,
        $guards:expr
    ) => {
        concat!(
            "SELECT * FROM (
            SELECT ",
            $column,
            " AS key, id, attempts + 1 < max_attempts AS spare FROM ",
            ready_of_kind!($queue, $kind),
            " AND ",
            $column,
            " IS NOT NULL
              AND ",
            $column,
            " > ",
            $after,
            " AND run_at <= ",
            $now,
            $guards,
            "
            ORDER BY ",
            $column,
            ", priority DESC, run_at, id
            LIMIT 1
            FOR UPDATE SKIP LOCKED
        ) AS after_key
        UNION ALL
        SELECT * FROM (
            SELECT ",
            $column,
            " AS key, id, attempts + 1 < max_attempts AS spare FROM ",
            ready_of_kind!($queue, $kind),
            " AND ",
            $column,
            " IS NOT NULL
              AND run_at <= ",
            $now,
            $guards,
            "
            ORDER BY ",
            $column,
            ", priority DESC, run_at, id
            LIMIT 1
            FOR UPDATE SKIP LOCKED
        ) AS from_first_key
        LIMIT 1"
        )
    };
}

/// The CTE `candidates` of a claim that takes turns between keys: for each row of `$keys` (a
/// key visited, with `key`, `visited`, and its first due job already locked, `id` and `spare`),
/// that job as its turn 1, then the key's next due jobs of kind `$kind` ready in queue `$queue`
/// (by the time `$now`) in its claim order, locked, as turns 2, 3, ..., up to `$share` turns in
/// all (an SQL expression that may name the row of `$keys`): one more descent of the key's
/// column `$column`'s ready index per key, only when `$share` is above 1. `$most_turns` (an SQL
/// expression that names no row) is the most turns `$share` gives any key: when it is 1, a
/// one-time filter skips the further turns altogether, where the key's scan would otherwise be
/// set up, and stopped at once, for each key visited.
macro_rules! turns_of_keys {
    (
        $keys:literal,
        $column:literal,
        $queue:literal,
        $kind:literal,
        $now:literal,
        $share:literal,
        $most_turns:literal
    ) => {
        concat!(
            "candidates AS (
    SELECT id, key, visited, 1::bigint AS turn, spare FROM ",
            $keys,
            "
    UNION ALL
    SELECT more.id, ",
            $keys,
            ".key, ",
            $keys,
            ".visited, more.turn, more.spare
    FROM ",
            $keys,
            "
    CROSS JOIN LATERAL (
        SELECT locked.id, locked.spare,
               1 + row_number() OVER (ORDER BY locked.priority DESC, locked.run_at, locked.id)
                 AS turn
        FROM (
            SELECT id, priority, run_at, attempts + 1 < max_attempts AS spare FROM ",
            ready_of_kind!($queue, $kind),
            " AND ",
            $column,
            " = ",
            $keys,
            ".key
              AND run_at <= ",
            $now,
            " AND id <> ",
            $keys,
            ".id
            ORDER BY priority DESC, run_at, id
            LIMIT ",
            $share,
            " - 1
            FOR UPDATE SKIP LOCKED
        ) AS locked
    ) AS more
    WHERE ",
            $most_turns,
            " > 1
)"
        )
    };
}

/// The key a job takes turns by: its fairness key, or, for a kind with a per-key limit, its
/// limit key (a kind has one or the other). The turn indexes of migration 23 are built on it.
macro_rules! turn_key {
    () => {
        "coalesce(fair_key, limit_key)"
    };
}

/// The order of the turn claims: priority (higher first), then turn, then turn key (byte by
/// byte, the `C` collation, as [`FairPlace`] compares them), then id, over rows whose turn key
/// is the column `$key` (the index's expression, or a CTE's column).
macro_rules! turn_order {
    ($key:expr) => {
        concat!("priority DESC, fair_turn, ", $key, " COLLATE \"C\", id")
    };
}

/// The first `$limit` (an SQL expression) ready jobs of kind `$kind` in queue `$queue` (SQL
/// expressions) that hold a turn and are due by `$now`, in turn order ([`turn_order!`]), locked
/// (`FOR UPDATE SKIP LOCKED`), as rows of `id`, `priority`, `fair_turn`, `turn_key` and `spare`
/// (whether the job has an attempt to spare): one range of `jobs_queue_ready_fair`, narrowed by
/// `$where`. Nothing while the queue is paused.
macro_rules! jobs_in_turn_order {
    ($queue:literal, $kind:literal, $now:literal, $where:expr, $limit:expr) => {
        concat!(
            "
    SELECT id, priority, fair_turn, ",
            turn_key!(),
            " AS turn_key,
           attempts + 1 < max_attempts AS spare
    FROM jobs_queue
    WHERE state = 'ready' AND queue = ",
            $queue,
            " AND kind = ",
            $kind,
            " AND fair_turn IS NOT NULL
      AND run_at <= ",
            $now,
            "
      AND ",
            queue_not_paused!($queue),
            $where,
            "
    ORDER BY ",
            turn_order!(turn_key!()),
            "
    LIMIT ",
            $limit,
            "
    FOR UPDATE SKIP LOCKED"
        )
    };
}

/// The condition that narrows a turn claim to the jobs of priority `$priority` after the place
/// `($turn, $key, $id)` in turn order (SQL parameters), and to nothing at all when a due job of
/// kind `$kind` of a higher priority is ready in queue `$queue`, so that the caller claims from
/// the front instead. The scan starts at that place, past the index entries of the jobs claimed
/// since the last vacuum (see [`CLAIM_JOBS_AFTER`]).
macro_rules! after_turn_place {
    ($queue:literal, $kind:literal, $priority:literal, $turn:literal, $key:literal, $id:literal) => {
        concat!(
            "
      AND priority = (SELECT ",
            $priority,
            "::smallint)
      AND (fair_turn, ",
            turn_key!(),
            " COLLATE \"C\", id)
          > ((SELECT ",
            $turn,
            "::bigint), (SELECT ",
            $key,
            "::text), (SELECT ",
            $id,
            "::bigint))
      AND ",
            first_higher_priority_job!($kind, $queue, $priority),
            " IS NULL"
        )
    };
}

/// The CTEs of a turn claim that give turns to up to `$limit` (an SQL expression) jobs of kind
/// `$kind` ready in queue `$queue` that became due (by `$now`) without one, as a job enqueued now
/// would take it, ending in `turns_given` (their ids): the turn the claims reached (`reached`,
/// per priority: the round recorded, or the furthest turn of the CTE `$read`, the jobs this claim
/// read), then, per key, one more than the greater of that and the key's last turn past it, and
/// on for the key's other jobs in their claim order. The jobs are found through
/// `jobs_queue_ready_fair_unturned` (one descent when there are none) and updated through the
/// primary key; the claims after this one can take them (a statement does not see its own
/// writes).
macro_rules! turns_given {
    ($queue:literal, $kind:literal, $now:literal, $read:literal, $limit:literal) => {
        concat!(
            "reached AS (
    SELECT priority, greatest(rounds.turn, taken.turn) AS turn
    FROM (SELECT priority, turn FROM jobs_fair_rounds WHERE queue = ",
            $queue,
            " AND kind = ",
            $kind,
            ") AS rounds
    FULL JOIN (SELECT priority, max(fair_turn) AS turn FROM ",
            $read,
            " GROUP BY priority) AS taken
      USING (priority)
), unturned AS (
    SELECT id, ",
            turn_key!(),
            " AS turn_key, priority, run_at FROM jobs_queue
    WHERE state = 'ready' AND queue = ",
            $queue,
            " AND kind = ",
            $kind,
            " AND ",
            turn_key!(),
            " IS NOT NULL
      AND fair_turn IS NULL AND run_at <= ",
            $now,
            "
    ORDER BY run_at, id
    LIMIT ",
            $limit,
            "
    FOR UPDATE SKIP LOCKED
), due_keys AS (
    SELECT keys.turn_key, keys.priority,
           greatest(coalesce(reached.turn, 0), last.fair_turn) AS after_turn
    FROM (SELECT DISTINCT turn_key, priority FROM unturned) AS keys
    LEFT JOIN reached USING (priority)
    LEFT JOIN LATERAL (
        SELECT fair_turn FROM jobs_queue
        WHERE state = 'ready' AND queue = ",
            $queue,
            " AND kind = ",
            $kind,
            " AND ",
            turn_key!(),
            " = keys.turn_key
          AND priority = keys.priority AND fair_turn > coalesce(reached.turn, 0)
        ORDER BY fair_turn DESC
        LIMIT 1
    ) AS last ON true
), due_turns AS (
    SELECT unturned.id,
           due_keys.after_turn + row_number() OVER (PARTITION BY unturned.turn_key,
                                                                unturned.priority
                                                   ORDER BY unturned.run_at, unturned.id)
             AS turn
    FROM unturned
    JOIN due_keys USING (turn_key, priority)
), turns_given AS (
    UPDATE jobs_queue AS j
    SET fair_turn = given.turn
    FROM unnest(ARRAY(SELECT id FROM due_turns ORDER BY id),
                ARRAY(SELECT turn FROM due_turns ORDER BY id)) AS given(id, turn)
    WHERE j.id = given.id
    RETURNING j.id
)"
        )
    };
}

/// The CTE `round_reached` of a turn claim: records, per priority, the furthest turn of the
/// jobs of `claimed` as the round of kind `$kind` in queue `$queue`, when it is further than the
/// one recorded. The jobs that come due next take turns after it.
macro_rules! round_reached {
    ($queue:literal, $kind:literal) => {
        concat!(
            "round_reached AS (
    INSERT INTO jobs_fair_rounds AS round (queue, kind, priority, turn)
    SELECT ",
            $queue,
            ", ",
            $kind,
            ", priority, max(fair_turn) FROM claimed
    GROUP BY priority
    ON CONFLICT (queue, kind, priority) DO UPDATE SET turn = excluded.turn
    WHERE round.turn < excluded.turn
)"
        )
    };
}

/// What a turn claim's `claimed` CTE returns beyond [`claimed_jobs!`]'s: each job's turn and key.
macro_rules! turn_returned {
    () => {
        ", j.fair_turn, coalesce(j.fair_key, j.limit_key) AS turn_key"
    };
}

/// A claim of ready jobs of kind `$2`, which has a fairness key, from queue `$1`, in the fair
/// claim order, with `$where` narrowing the scan: the parameters and rows of
/// [`CLAIM_FAIR_JOBS`]. It also gives turns to as many jobs of the kind in the queue that became
/// due without one as it may claim.
macro_rules! claim_fair_jobs {
    ($where:expr) => {
        concat!(
            "
WITH candidates AS (",
            jobs_in_turn_order!(
                "(SELECT $1::text)",
                "(SELECT $2::text)",
                "now()",
                concat!(
                    "
      AND (SELECT set_config('synchronous_commit', 'off', true)) = 'off'",
                    $where
                ),
                "(SELECT $3::bigint)"
            ),
            "
), ",
            turns_given!(
                "(SELECT $1::text)",
                "(SELECT $2::text)",
                "now()",
                "candidates",
                "(SELECT $3::bigint)"
            ),
            ",",
            claimed_prefix!("$5", turn_order!("turn_key"), "id", ""),
            ", claimed AS (",
            claimed_jobs!("$4::float8", "now()", turn_returned!()),
            "
), ",
            round_reached!("$1", "$2"),
            "
SELECT claimed.*, given.turns_given
FROM (SELECT count(*) AS turns_given FROM turns_given) AS given
LEFT JOIN claimed ON true"
        )
    };
}

/// Claims up to `$3` ready jobs of kind `$2`, which has a fairness key, from queue `$1`, from
/// the front of the fair claim order: by priority (higher first), then turn, then key (byte by
/// byte, the `C` collation, as [`FairPlace`] compares them), then id; each leased for `$4`
/// seconds. Returns what [`CLAIM_JOBS`] returns, and each job's turn (`fair_turn`) and key
/// (`turn_key`), and on every row `turns_given`: how many jobs that became due without a turn
/// it gave one (the next claim can take them); when it claims nothing, one row whose job columns
/// are null. Of the jobs beyond the first `$5` (the free slots; the rest are claimed ahead of
/// them), it takes those before the first on its last attempt ([`claimed_prefix!`]).
///
/// Every ready job with a key took its key's next turn when it became due (migrations 22 and
/// 23, and the claims for the jobs that became due with time): one more than its key's last
/// turn among the ready jobs of its queue, kind and priority, and than the turn the kind's
/// claims of that priority in the queue had reached. So the order is a ring of the keys: the
/// first job of every key, in key order, then the second. The claim reads it as any claim reads
/// the ready index, one range of the index `jobs_queue_ready_fair` ([`jobs_in_turn_order!`]):
/// the jobs of other kinds, keyed or not, are never read. It records the highest turn it took of
/// each priority in `jobs_fair_rounds`, after which the jobs that come due next take theirs
/// ([`round_reached!`]), and gives turns to the jobs that became due without one
/// ([`turns_given!`]).
///
/// Like the other claims, the claim commits without waiting for its WAL to be flushed, and claims
/// nothing while queue `$1` is paused. It reads its kind and queue through subqueries, so that
/// PostgreSQL keeps its generic plan after five executions on a connection: a plan made for the
/// names of a kind that is a small part of the table is estimated cheaper, and would be made
/// again at every execution (about 1 ms for a claim of 16).
pub const CLAIM_FAIR_JOBS: &str = claim_fair_jobs!("");

/// Claims as [`CLAIM_FAIR_JOBS`] does, but only jobs of priority `$6` after the place `($7,
/// $8, $9)` (turn, key, id) in the fair claim order: where the previous claim of the kind in
/// this queue ended; and nothing at all when a due job of the kind of a higher priority than
/// `$6` is ready ([`after_turn_place!`]).
pub const CLAIM_FAIR_JOBS_AFTER: &str = claim_fair_jobs!(after_turn_place!(
    "(SELECT $1::text)",
    "(SELECT $2::text)",
    "$6",
    "$7",
    "$8",
    "$9"
));

/// The CTE `claim_counted`: counts a claim of kind `$1` in the kind's row of
/// `jobs_limited_claims` (making it at the first), once for each row of `$from` (an SQL `FROM`
/// list, with its conditions); returns the count written (`claims`). The row stays locked until
/// the claim's transaction ends.
macro_rules! claim_counted {
    ($from:literal) => {
        concat!(
            "claim_counted AS (
    INSERT INTO jobs_limited_claims AS counted (kind, claims)
    SELECT $1, 1 FROM ",
            $from,
            "
    ON CONFLICT (kind) DO UPDATE SET claims = counted.claims + 1
    RETURNING counted.claims
)"
        )
    };
}

/// Takes the advisory lock that serializes the claims of kind `$1`, which has a limit on its
/// running jobs or on their rate, or a per-key limit (see [`CLAIM_LIMITED_JOBS`]), until the
/// transaction ends, and counts the claim in the kind's row of `jobs_limited_claims` (whose row
/// lock is held as long: see [`sole_claim!`]); and has the transaction's statements use their
/// generic plans at once (`plan_cache_mode`, for this transaction alone): a claim of a kind with
/// a per-key limit is planned, one-off, at about the cost of running it, and PostgreSQL would
/// otherwise plan it again at every execution.
pub const LOCK_LIMITED_KIND: &str = concat!(
    "
WITH locked AS (
    SELECT pg_advisory_xact_lock(hashtextextended('jobs_max_running:' || $1, 0)) AS lock,
           set_config('plan_cache_mode', 'force_generic_plan', true) AS plans
), ",
    claim_counted!("locked"),
    "
SELECT claims FROM claim_counted"
);

/// The CTEs of a claim of kind `$1` (which has a limit) that may run as a statement of its own,
/// without [`LOCK_LIMITED_KIND`] before it: `kind_lock` takes the kind's advisory lock if no
/// other transaction holds it, `claim_counted` then counts the claim in the kind's row of
/// `jobs_limited_claims` (its row lock held until the statement commits), and `sole_claim`
/// says whether the claim may take jobs (`sole`): only when it took the lock and the count it
/// wrote is one more than the count the statement's snapshot saw.
///
/// A statement's snapshot is taken before it runs, so before the lock: a claim that committed in
/// between would not be seen, nor would the jobs it started be counted. Every claim of a kind
/// with a limit counts itself in that row, so the counts differ exactly then, and the claim takes
/// nothing; the caller claims in a transaction that waits for the lock first. A claim of a
/// worker that does not count its claims (a version before migration 24, during a rolling
/// deploy) holds the advisory lock while it runs: a statement that finds the lock taken takes
/// nothing either; but one whose snapshot was taken just before such a claim committed, and
/// whose lock came just after, cannot tell, and counts the running jobs without that claim's
/// (a window of the statement's start, well under a millisecond; until the older workers are
/// gone). Within a transaction that holds the lock and counted its claim already, the
/// statement takes the lock again (it is its own), sees that count, and may take jobs.
macro_rules! sole_claim {
    () => {
        concat!(
            "kind_lock AS (
    SELECT pg_try_advisory_xact_lock(hashtextextended('jobs_max_running:' || $1, 0)) AS taken
), ",
            claim_counted!("kind_lock WHERE taken"),
            ", sole_claim AS (
    SELECT coalesce((SELECT claims FROM claim_counted)
                      = coalesce((SELECT claims FROM jobs_limited_claims WHERE kind = $1), 0) + 1,
                    false) AS sole
)"
        )
    };
}

/// The limits of a limited claim, as two CTEs: `kept_starts`, the starts of kind `$1` still
/// inside the longer of the window `$7` and its row's, and `room`, how many jobs the claim may
/// take: no more than `$3`, than leave at most `$4` of the kind running, nor than leave at most
/// `$6` started in the last `$7` seconds (either limit off when null). See
/// [`CLAIM_LIMITED_JOBS`].
macro_rules! limited_room {
    () => {
        "kept_starts AS (
    SELECT least(started.at, statement_timestamp()) AS at, started.jobs,
           floor(extract(epoch FROM least(started.at, statement_timestamp())) / ($7::float8 / 64))
             = floor(extract(epoch FROM statement_timestamp()) / ($7::float8 / 64))
             AS in_this_slice
    FROM jobs_rate_limits AS rate,
         unnest(rate.started_at, rate.started) AS started(at, jobs)
    WHERE rate.kind = $1 AND $6::integer IS NOT NULL
      AND started.at > statement_timestamp()
                       - make_interval(secs => greatest($7::float8, rate.window_secs))
), room AS (
    SELECT greatest(0, least(
        $3,
        CASE WHEN $4::bigint IS NULL THEN $3
             ELSE $4 - (SELECT count(*) FROM jobs_queue
                        WHERE state = 'running' AND kind = (SELECT $1::text))
        END,
        CASE WHEN $6::integer IS NULL THEN $3
             ELSE $6 - (SELECT coalesce(sum(jobs), 0) FROM kept_starts
                        WHERE at > statement_timestamp() - make_interval(secs => $7::float8))
        END)) AS jobs
)"
    };
}

/// The CTE `starts_recorded` of a limited claim: under a rate limit (`$6`, `$7`), rewrites kind
/// `$1`'s row of `jobs_rate_limits` with the starts of `kept_starts` and those of `claimed`. See
/// [`CLAIM_LIMITED_JOBS`].
macro_rules! starts_recorded {
    () => {
        "starts_recorded AS (
    INSERT INTO jobs_rate_limits AS rate (kind, window_secs, started_at, started)
    SELECT $1, $7,
           ARRAY(SELECT at FROM kept_starts WHERE NOT in_this_slice ORDER BY at)
             || statement_timestamp(),
           ARRAY(SELECT jobs FROM kept_starts WHERE NOT in_this_slice ORDER BY at)
             || (count(*) + (SELECT coalesce(sum(jobs), 0) FROM kept_starts
                             WHERE in_this_slice))::integer
    FROM claimed
    WHERE $6::integer IS NOT NULL
    HAVING count(*) > 0
    ON CONFLICT (kind) DO UPDATE
    SET window_secs = excluded.window_secs, started_at = excluded.started_at,
        started = excluded.started
)"
    };
}

/// [`CLAIM_LIMITED_JOBS`], with `$where` narrowing each queue's scan.
macro_rules! claim_limited_jobs {
    ($where:literal) => {
        concat!(
            "
WITH ",
            limited_room!(),
            ", claimable AS (
    SELECT id FROM (
        SELECT candidate.id, candidate.priority, candidate.run_at
        FROM unnest((SELECT $2::text[])) AS claimed(queue)
        CROSS JOIN LATERAL (
            SELECT id, priority, run_at FROM jobs_queue
            WHERE state = 'ready' AND queue = claimed.queue AND kind = $1
              AND run_at <= statement_timestamp()
              AND ",
            queue_not_paused!("claimed.queue"),
            $where,
            "
            ORDER BY priority DESC, run_at, id
            LIMIT (SELECT jobs FROM room)
            FOR UPDATE SKIP LOCKED
        ) AS candidate
        ORDER BY candidate.priority DESC, candidate.run_at, candidate.id
        LIMIT (SELECT $3::bigint)
    ) AS first
    ORDER BY priority DESC, run_at, id
    LIMIT (SELECT jobs FROM room)
), claimed AS (",
            claimed_jobs!("$5", "statement_timestamp()"),
            "
), ",
            starts_recorded!(),
            "
SELECT * FROM claimed"
        )
    };
}

/// Claims up to `$3` ready jobs of kind `$1` from queues `$2`, each leased for `$5` seconds, but
/// no more than leave at most `$4` jobs of the kind running across all workers, and no more
/// than leave at most `$6` jobs of the kind started in the last `$7` seconds (either limit is
/// off when null). Run after [`LOCK_LIMITED_KIND`] in the same transaction, so that the count
/// of running jobs and the starts in the window are taken after any other claim of the kind has
/// committed. Paused queues of `$2` are skipped. Returns what [`CLAIM_JOBS`] returns.
///
/// The claim's time is the start of this statement, which comes after the lock is granted
/// (`now()` would be when the transaction began, before it waited): the jobs' start times
/// (`attempted_at`) are that time, and the starts of a kind only grow, claim after claim.
///
/// Under a rate limit, the claim rewrites the kind's row of `jobs_rate_limits`: it keeps the
/// starts still inside the longer of its window and the row's (a worker with a longer window
/// may share the row while limits change), moved back to now should the clock have stepped
/// back, and records its own. Starts are recorded per slice of 1/64 of the window (on a fixed
/// grid of the clock): a claim in the same slice as the last recorded start adds its jobs to it
/// and moves it to its own time. A start recorded later than it happened only keeps it in the
/// window longer, so the limit still holds, at the cost of up to 1/64 of the window of delay;
/// in exchange the row holds at most about 65 starts, whatever the rate and the window.
///
/// Each queue is scanned apart through the ready index's `(queue, kind, ...)` prefix, as
/// [`CLAIM_JOBS`] scans each kind, so jobs of other kinds cost nothing; the running jobs are
/// counted through the index of running jobs (`jobs_queue_leases`), whose size is bounded by the
/// slots of all workers, not by the backlog, and only under a running limit.
pub const CLAIM_LIMITED_JOBS: &str = claim_limited_jobs!("");

/// [`CLAIM_LIMITED_JOBS`] for the jobs without a limit key of a kind with a per-key limit (jobs
/// enqueued before the kind declared its key): the kind's own limits hold, no per-key one.
pub const CLAIM_UNKEYED_LIMITED_JOBS: &str =
    claim_limited_jobs!("\n              AND limit_key IS NULL");

/// Whether the start at `$at` (an SQL expression) falls in the same 1/64 of the per-key rate
/// limit's window `$11` as the claim's time, on a fixed grid of the clock (see
/// [`CLAIM_LIMITED_JOBS`]).
macro_rules! in_this_slice {
    ($at:literal) => {
        concat!(
            "floor(extract(epoch FROM least(",
            $at,
            ", statement_timestamp())) / ($11::float8 / 64))
             = floor(extract(epoch FROM statement_timestamp()) / ($11::float8 / 64))"
        )
    };
}

/// The recorded starts of limit key `$key` (an SQL expression) of kind `$1` still inside the
/// longer of the window `$11` and the row's: a `FROM` list and `WHERE` clause over `kept(at,
/// jobs)`, read by the primary key of `jobs_key_rate_limits`.
macro_rules! kept_key_starts {
    ($key:literal) => {
        concat!(
            "jobs_key_rate_limits AS row_of_key,
                 unnest(row_of_key.started_at, row_of_key.started) AS kept(at, jobs)
            WHERE row_of_key.kind = $1 AND row_of_key.key = ",
            $key,
            "
              AND kept.at > statement_timestamp()
                            - make_interval(secs => greatest($11::float8, row_of_key.window_secs))"
        )
    };
}

/// The CTEs `running_keys` (the running jobs of kind `$1` counted per limit key, through the
/// index of running jobs, bounded by all workers' slots) and `running_by_key` (the same counts as
/// one `jsonb` object, in which a key's count is found by a binary search: a lookup in the
/// counted rows would read them all for every key looked up; building the object costs about a
/// microsecond per key running, once per claim).
macro_rules! running_by_key {
    () => {
        concat!(
            running_keys!(),
            ", running_by_key AS (
    SELECT coalesce(jsonb_object_agg(key, running), '{}') AS running FROM running_keys
)"
        )
    };
}

/// The CTE `running_keys`: the running jobs of kind `$1` counted per limit key (`key`,
/// `running`), through the index of running jobs, bounded by all workers' slots, narrowed by
/// `$and` (an SQL condition: none when empty). The keys are grouped byte by byte (the `C`
/// collation: the same groups, as text equality is byte equality, without sorting by the
/// database's collation).
macro_rules! running_keys {
    () => {
        running_keys!("")
    };
    ($and:literal) => {
        concat!(
            "running_keys AS (
    SELECT limit_key COLLATE \"C\" AS key, count(*) AS running FROM jobs_queue
    WHERE state = 'running' AND kind = (SELECT $1::text) AND limit_key IS NOT NULL",
            $and,
            "
    GROUP BY 1
)"
        )
    };
}

/// How many more jobs of limit key `$key` (an SQL expression) of kind `$1` may start now: `$8`
/// less its running jobs (from `running_by_key`), and, under a per-key rate limit (`$10` jobs in
/// `$11` seconds), `$10` less its starts in the window (one probe of the primary key of
/// `jobs_key_rate_limits`).
macro_rules! key_room {
    ($key:literal) => {
        concat!(
            "least(
               $8 - coalesce(((SELECT running FROM running_by_key) ->> ",
            $key,
            ")::bigint, 0),
               coalesce($10::integer - (SELECT sum(window_start.jobs)
                               FROM jobs_key_rate_limits AS row_of_key,
                                    unnest(row_of_key.started_at, row_of_key.started)
                                      AS window_start(at, jobs)
                               WHERE $10::integer IS NOT NULL AND row_of_key.kind = $1
                                 AND row_of_key.key = ",
            $key,
            "
                                 AND window_start.at > statement_timestamp()
                                                       - make_interval(secs => $11::float8)),
                        $10::integer, $8))"
        )
    };
}

/// The next key after `$after` in the ring of kind `$1`'s limit keys with due jobs ready in queue
/// `$2`, its first due job locked ([`first_job_in_ring!`], with `$guards`), and the key's room
/// ([`key_room!`]): a row of `key`, `id`, `spare` and `room`.
macro_rules! key_job_and_room {
    ($after:literal, $guards:expr) => {
        concat!(
            "SELECT candidate.key, candidate.id, candidate.spare, ",
            key_room!("candidate.key"),
            " AS room
          FROM (",
            first_job_in_ring!(
                "limit_key",
                "$2",
                "$1",
                "statement_timestamp()",
                $after,
                $guards
            ),
            ") AS candidate
          OFFSET 0"
        )
    };
}

/// Claims up to `$3` ready jobs of kind `$1`, which has a per-key limit, from queue `$2`, each
/// leased for `$5` seconds: no more than leave at most `$8` jobs with the same limit key running
/// across all workers, nor than leave at most `$10` of a key started in the last `$11` seconds
/// (off when null), nor than the kind's own limits allow (`$4`, `$6`, `$7` as in
/// [`CLAIM_LIMITED_JOBS`]). `$9` is the last key the previous claim took a job of (null at
/// first). Run after [`LOCK_LIMITED_KIND`] in the same transaction. Returns what [`CLAIM_JOBS`]
/// returns, and on every row `key_cursor`: the key of the last job this claim took in turn
/// order, where the next one goes on. When the claim takes nothing, it returns one row whose
/// job columns are null, with the last key it visited as `key_cursor` (null when it visited
/// none). Every row also holds `turn_key` (the key whose turn took the job) and `keys_at_limit`
/// (how many keys were at their running limit when the statement began).
///
/// The running jobs of the kind are counted per key through the index of running jobs (bounded
/// by all workers' slots), into one `jsonb` object, in which a key's count is found by a binary
/// search (a lookup in the counted rows would read them all, for every key visited; building
/// the object costs about a microsecond per key running, once per claim). The keys with due
/// jobs are visited as a ring in key order, starting after `$9` and wrapping around, each
/// found, and its first due job locked, by one descent of `jobs_queue_ready_limit_key`
/// ([`first_job_in_ring!`]), and its room read: its running jobs
/// from those counted, and under a per-key rate limit its starts in the window from its row of
/// `jobs_key_rate_limits` (one probe of the primary key). The keys without room are passed over
/// (their first job stays locked until the claim commits; the kind's claims are serialized
/// anyway) until as many keys with room as the claim may take jobs are found, the ring comes
/// round, or the claim has visited 64 keys more than it may take jobs and keys at their running
/// limit: past keys whose rate window is full, the next claim goes on after the last key this
/// one visited. Each key with room offers its first jobs in claim order, no more than its room,
/// and as many as the claim may take shared between those keys, rounded up (beyond its first,
/// found by one more descent); the claim takes them turn by turn, the first job of every key,
/// then the second ([`turns_of_keys!`]). So the keys take turns, and a key with a backlog never
/// holds back the others. Of the jobs beyond the first `$12` in that turn order (the free slots;
/// the rest are claimed ahead of them), it takes those before the first on its last attempt
/// ([`claimed_prefix!`]). The rows come in that turn order.
///
/// Under a per-key rate limit, the starts of each key live in its row of
/// `jobs_key_rate_limits`, kept and recorded as [`CLAIM_LIMITED_JOBS`] keeps a kind's (per 1/64
/// of the window); the claim reads the rows of the keys it visits, rewrites those of the keys it
/// starts jobs of, and deletes as many rows whose starts have all left the window (and the
/// row's own, when a worker with a longer window wrote it) as it rewrites, and 16 more.
pub const CLAIM_KEY_LIMITED_JOBS: &str = concat!(
    "
WITH RECURSIVE ",
    limited_room!(),
    ", ",
    running_by_key!(),
    ", ring AS (
    SELECT first.key, first.id, first.spare, first.key AS start, 1 AS visited, first.room,
           CASE WHEN first.room > 0 THEN 1 ELSE 0 END AS opened
    FROM (",
    key_job_and_room!(
        "$9",
        concat!(
            "
              AND (SELECT jobs FROM room) > 0 AND ",
            queue_not_paused!("$2")
        )
    ),
    ") AS first
    UNION ALL
    SELECT next.key, next.id, next.spare, ring.start, ring.visited + 1, next.room,
           ring.opened + CASE WHEN next.room > 0 THEN 1 ELSE 0 END
    FROM ring
    CROSS JOIN LATERAL (",
    key_job_and_room!("ring.key", ""),
    ") AS next
    WHERE ring.opened < (SELECT jobs FROM room)
      AND ring.visited < (SELECT jobs FROM room) + (SELECT count(*) FROM running_keys) + 64
      AND next.key <> ring.start
), open_keys AS (
    SELECT key, id, spare, visited, room FROM ring WHERE room > 0
), share AS (
    SELECT ceil((SELECT jobs FROM room)::numeric / greatest(count(*), 1))::bigint AS jobs
    FROM open_keys
), ",
    turns_of_keys!(
        "open_keys",
        "limit_key",
        "$2",
        "$1",
        "statement_timestamp()",
        "least(open_keys.room, (SELECT jobs FROM share))",
        "(SELECT jobs FROM share)"
    ),
    ",",
    claimed_prefix!(
        "$12",
        "turn, visited",
        "id, key, turn, visited",
        " AND place <= (SELECT jobs FROM room)"
    ),
    ", claimed AS (",
    claimed_jobs!("$5", "statement_timestamp()"),
    "
), ",
    starts_recorded!(),
    ", taken AS (
    SELECT key, count(*) AS jobs FROM claimable WHERE $10::integer IS NOT NULL GROUP BY key
), taken_starts AS (
    SELECT taken.key, least(kept.at, statement_timestamp()) AS at, kept.jobs,
           ",
    in_this_slice!("kept.at"),
    " AS in_this_slice
    FROM taken, ",
    kept_key_starts!("taken.key"),
    "
), key_starts_recorded AS (
    INSERT INTO jobs_key_rate_limits AS rate
        (kind, key, window_secs, last_started_at, started_at, started)
    SELECT $1, taken.key, $11, statement_timestamp(),
           ARRAY(SELECT at FROM taken_starts
                 WHERE taken_starts.key = taken.key AND NOT in_this_slice ORDER BY at)
             || statement_timestamp(),
           ARRAY(SELECT jobs FROM taken_starts
                 WHERE taken_starts.key = taken.key AND NOT in_this_slice ORDER BY at)
             || (taken.jobs + (SELECT coalesce(sum(jobs), 0) FROM taken_starts
                               WHERE taken_starts.key = taken.key AND in_this_slice))::integer
    FROM taken
    ON CONFLICT (kind, key) DO UPDATE
    SET window_secs = excluded.window_secs, last_started_at = excluded.last_started_at,
        started_at = excluded.started_at, started = excluded.started
), key_starts_pruned AS (
    DELETE FROM jobs_key_rate_limits
    WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM jobs_key_rate_limits AS rate
        WHERE rate.kind = $1 AND $10::integer IS NOT NULL
          AND rate.last_started_at < statement_timestamp() - make_interval(secs => $11::float8)
          AND rate.last_started_at < statement_timestamp()
                                     - make_interval(secs => greatest($11::float8, rate.window_secs))
          AND rate.key NOT IN (SELECT key FROM claimable)
        LIMIT 16 + (SELECT count(*) FROM taken)))
)
SELECT claimed.*, claimable.key AS turn_key, round_end.key AS key_cursor,
       (SELECT count(*) FROM running_keys WHERE running >= $8) AS keys_at_limit
FROM (SELECT coalesce((SELECT key FROM claimable ORDER BY turn DESC, visited DESC LIMIT 1),
                      (SELECT key FROM ring ORDER BY visited DESC LIMIT 1)) AS key) AS round_end
LEFT JOIN (claimed JOIN claimable USING (id)) ON true
ORDER BY claimable.turn, claimable.visited"
);

/// Every job a claim in turn order of a kind with a per-key limit read (`scanned`) when each
/// key read has room for all of its (`all_fit`), and none otherwise.
macro_rules! all_read_when_all_fit {
    () => {
        "SELECT id, priority, fair_turn, turn_key, spare FROM scanned
    WHERE (SELECT fit FROM all_fit)"
    };
}

/// The CTE `candidates` of a claim in turn order of a kind with a per-key limit that takes every
/// job it read when each key read has room for all of its, and none otherwise
/// ([`all_read_when_all_fit!`]). See [`CLAIM_KEY_TURNS`].
macro_rules! all_read_or_none {
    () => {
        concat!("candidates AS (\n    ", all_read_when_all_fit!(), "\n)")
    };
}

/// The CTE `candidates` of a claim in turn order of a kind with a per-key limit that takes the
/// jobs it read (`scanned`) up to the first whose key has no room left for it: every one when
/// each key read has room for all of its (`all_fit`), and otherwise each key's jobs numbered in
/// its claim order against its room, checked in turn order (two sorts). See
/// [`CLAIM_KEY_TURNS_TO_LIMIT`].
macro_rules! read_up_to_limit {
    () => {
        concat!(
            "candidates AS (
    ",
            all_read_when_all_fit!(),
            "
    UNION ALL
    SELECT id, priority, fair_turn, turn_key, spare FROM (
        SELECT id, priority, fair_turn, turn_key, spare,
               bool_and(nth <= room) OVER (ORDER BY ",
            turn_order!("turn_key"),
            ") AS before_limit
        FROM (
            SELECT scanned.*,
                   row_number() OVER (PARTITION BY turn_key
                                      ORDER BY priority DESC, fair_turn, id) AS nth,
                   $8 - coalesce(running_keys.running, 0) AS room
            FROM scanned
            LEFT JOIN running_keys ON running_keys.key = scanned.turn_key COLLATE \"C\"
            WHERE NOT (SELECT fit FROM all_fit)
        ) AS of_key
    ) AS in_order
    WHERE before_limit
)"
        )
    };
}

/// A claim in turn order of kind `$1`, which has a per-key limit, from queue `$2`, with `$where`
/// narrowing the scan, taking of the jobs it read all or none (`all_read_or_none`) or those up
/// to the first without room (`read_up_to_limit`): the parameters and rows of
/// [`CLAIM_KEY_TURNS_TO_LIMIT`]. Each way names the CTE `candidates` of the jobs it takes
/// ([`all_read_or_none!`], [`read_up_to_limit!`]) and the SQL expression of whether it left a
/// job it read for want of room (`stopped_at_limit`).
macro_rules! claim_key_turns {
    (@ $where:expr, $candidates:expr, $stopped_at_limit:literal) => {
        concat!(
            "
WITH ",
            sole_claim!(),
            ", ",
            limited_room!(),
            ", ",
            running_keys!(" AND (SELECT sole FROM sole_claim)"),
            ", at_limit AS (
    SELECT count(*) AS keys FROM running_keys WHERE running >= $8
), scanned AS (",
            jobs_in_turn_order!(
                "(SELECT $2::text)",
                "(SELECT $1::text)",
                "statement_timestamp()",
                concat!(
                    "
      AND (SELECT sole FROM sole_claim)
      AND (SELECT keys FROM at_limit) = 0 AND (SELECT jobs FROM room) > 0",
                    $where
                ),
                "(SELECT jobs FROM room)"
            ),
            "
), all_fit AS (
    SELECT NOT EXISTS (
        SELECT FROM (SELECT turn_key, count(*) AS jobs FROM scanned GROUP BY turn_key) AS read
        LEFT JOIN running_keys ON running_keys.key = read.turn_key COLLATE \"C\"
        WHERE read.jobs > $8 - coalesce(running_keys.running, 0)
    ) AS fit
), ",
            $candidates,
            ", ",
            turns_given!(
                "(SELECT $2::text)",
                "(SELECT $1::text)",
                "statement_timestamp()",
                "scanned",
                "(SELECT CASE WHEN sole THEN $3::bigint ELSE 0 END FROM sole_claim)"
            ),
            ",",
            claimed_prefix!("$9", turn_order!("turn_key"), "id", ""),
            ", claimed AS (",
            claimed_jobs!("$5", "statement_timestamp()", turn_returned!()),
            "
), ",
            starts_recorded!(),
            ", ",
            round_reached!("$2", "$1"),
            "
SELECT claimed.*, given.turns_given, at_limit.keys AS keys_at_limit,
       ",
            $stopped_at_limit,
            " AS stopped_at_limit, sole_claim.sole
FROM (SELECT count(*) AS turns_given FROM turns_given) AS given
CROSS JOIN at_limit
CROSS JOIN sole_claim
LEFT JOIN claimed ON true"
        )
    };
    ($where:expr, all_read_or_none) => {
        claim_key_turns!(
            @ $where,
            all_read_or_none!(),
            "NOT (SELECT fit FROM all_fit)"
        )
    };
    ($where:expr, read_up_to_limit) => {
        claim_key_turns!(
            @ $where,
            read_up_to_limit!(),
            "(SELECT count(*) FROM scanned) > (SELECT count(*) FROM candidates)"
        )
    };
}

/// Claims up to `$3` ready jobs of kind `$1`, which has a per-key running limit and no per-key
/// rate limit, from queue `$2`, in turn order, each leased for `$5` seconds: no more than leave
/// at most `$8` jobs with the same limit key running across all workers, nor than the kind's own
/// limits allow (`$4`, `$6`, `$7` as in [`CLAIM_LIMITED_JOBS`]); but nothing at all when a key
/// is at its limit already, for [`CLAIM_KEY_LIMITED_JOBS`] to walk the keys instead. Run after
/// [`LOCK_LIMITED_KIND`] in the same transaction, or as a statement of its own, when it claims
/// only if it has the kind to itself ([`sole_claim!`]; see [`CLAIM_KEY_TURNS`]). Returns what [`CLAIM_FAIR_JOBS`] returns (the
/// jobs with their turns and keys, in any order, and `turns_given`), and on every row
/// `keys_at_limit`, how many keys were at their limit (when not 0, the claim read nothing), and
/// `stopped_at_limit`, whether it stopped before a job its key had no room for, and `sole`,
/// whether it had the kind to itself (when not, it took nothing). Of the jobs beyond the
/// first `$9` in turn order (the free slots; the rest are claimed ahead of them), it takes those
/// before the first on its last attempt ([`claimed_prefix!`]).
///
/// The jobs with a limit key take turns by it, as a fair kind's take turns by their fairness key
/// (migration 23; see [`CLAIM_FAIR_JOBS`]), and the claim reads them the same way: one range of
/// `jobs_queue_ready_fair`, as many jobs as it may take, and takes them in turn order up to the
/// first whose key has no room left (its running jobs counted as [`CLAIM_KEY_LIMITED_JOBS`]
/// counts them, and the jobs of the key taken before it). While no key is at its limit, each key
/// has room for one job at least, and a key's jobs are met in its claim order: so the keys take
/// turns, and the claim stops only at a key it brings to its limit itself, whose next job is
/// then the first the next claim reads. That key is at its limit: the next claims walk the keys,
/// which serve every key its first jobs, until no key is; the claim after them starts at the
/// front of the turn order. Walking the keys while one is at its limit passes over that key with
/// one descent of an index, where a read in turn order would meet one of its jobs in every turn.
///
/// The claim records the round it reached and gives turns to the jobs that became due without one,
/// as [`CLAIM_FAIR_JOBS`] does. Like every limited claim, it waits for its commit to be flushed
/// (its running jobs must count after a crash). In a transaction its generic plan is used at
/// once ([`LOCK_LIMITED_KIND`]); alone, it is planned one-off for its first five executions on a
/// connection only: the kind and queue are read through subqueries, so that a plan made for a
/// kind that is a small part of the table is not estimated cheaper than the generic one
/// (PostgreSQL would then plan it again at every execution).
pub const CLAIM_KEY_TURNS_TO_LIMIT: &str = claim_key_turns!("", read_up_to_limit);

/// The condition that narrows a per-key claim in turn order (of kind `$1` from queue `$2`) to
/// the jobs of priority `$10` after the place `($11, $12, $13)`: [`after_turn_place!`].
macro_rules! after_key_turn_place {
    () => {
        after_turn_place!(
            "(SELECT $2::text)",
            "(SELECT $1::text)",
            "$10",
            "$11",
            "$12",
            "$13"
        )
    };
}

/// Claims as [`CLAIM_KEY_TURNS_TO_LIMIT`] does, but only jobs of priority `$10` after the place
/// `($11, $12, $13)` (turn, key, id) in turn order: where the previous claim of the kind in this
/// queue ended; and nothing at all when a due job of the kind of a higher priority than `$10` is
/// ready ([`after_turn_place!`]).
pub const CLAIM_KEY_TURNS_TO_LIMIT_AFTER: &str =
    claim_key_turns!(after_key_turn_place!(), read_up_to_limit);

/// Claims as [`CLAIM_KEY_TURNS_TO_LIMIT`] does, but takes every job it read or none: when a key
/// read has no room for all of its jobs, it takes none (`stopped_at_limit`). Run as a statement
/// of its own, without [`LOCK_LIMITED_KIND`] before it (it claims only when it has the kind to
/// itself: [`sole_claim!`]), while the claims' reads fit; once one does not, the claims of their
/// own take the jobs up to the first without room ([`CLAIM_KEY_TURNS_TO_LIMIT`], run alone the
/// same way) until a read fits again. While no key is near its limit, a claim reads each key's
/// next turn or few, and the jobs all fit; it is then spared checking each key's jobs in turn
/// order against its room (two sorts, with the jobs read kept a second time): 0.25 ms of 2.7
/// for a claim of 128 with 256 jobs running (`EXPLAIN ANALYZE`, best of 21).
///
/// One round trip, where a transaction takes four (`BEGIN`, the lock, the claim, `COMMIT`). Run
/// alone, a claim in turn order is planned one-off for its first five executions on a
/// connection only, as the other claims are.
pub const CLAIM_KEY_TURNS: &str = claim_key_turns!("", all_read_or_none);

/// Claims as [`CLAIM_KEY_TURNS`] does, but only after a place in turn order, as
/// [`CLAIM_KEY_TURNS_TO_LIMIT_AFTER`] does.
pub const CLAIM_KEY_TURNS_AFTER: &str = claim_key_turns!(after_key_turn_place!(), all_read_or_none);

/// Whether a due job of kind `$1` with a limit key is ready in queue `$2`: after a claim of a
/// kind with a per-key limit that took nothing, whether the jobs without a key may be claimed
/// (they are claimed only when no keyed job is due).
pub const KEYED_JOBS_DUE: &str = "
SELECT EXISTS (SELECT FROM jobs_queue
               WHERE state = 'ready' AND queue = $2 AND kind = $1 AND limit_key IS NOT NULL
                 AND run_at <= statement_timestamp())";

/// Seconds from now until kind `$1`'s rate limit, at most `$2` starts in any `$3` seconds, lets
/// a job start again; no row when it lets one start now. Run after a claim of the kind, under
/// its lock: the time the first start whose leaving brings the starts still in the window
/// under the limit leaves it.
pub const RATE_LIMIT_ROOM_IN: &str = "
WITH window_starts AS (
    SELECT started.at, started.jobs
    FROM jobs_rate_limits AS rate,
         unnest(rate.started_at, rate.started) AS started(at, jobs)
    WHERE rate.kind = $1
      AND started.at > clock_timestamp() - make_interval(secs => $3::float8)
), leaving AS (
    SELECT at, sum(jobs) OVER (ORDER BY at) AS gone, sum(jobs) OVER () AS total
    FROM window_starts
)
SELECT greatest(0, extract(epoch FROM at + make_interval(secs => $3::float8)
                                      - clock_timestamp()))::float8
FROM leaving
WHERE total >= $2 AND total - gone < $2
ORDER BY at
LIMIT 1";

/// Whether a due job of kind `$1` is ready in one of queues `$2` that is not paused: after a
/// claim of the kind that took fewer jobs than it asked for, whether its limits (or other
/// claims' locks) held some back, rather than the kind running out of work it may claim. One
/// probe of the ready index per queue.
pub const DUE_JOBS_REMAIN: &str = concat!(
    "
SELECT EXISTS (
    SELECT FROM unnest((SELECT $2::text[])) AS limited(queue)
    WHERE ",
    queue_not_paused!("limited.queue"),
    "
      AND EXISTS (SELECT FROM jobs_queue
                  WHERE state = 'ready' AND queue = limited.queue AND kind = $1
                    AND run_at <= statement_timestamp()))"
);

/// A job taken by a worker, with the lease token that fences its outcome.
#[derive(Debug, Clone, FromRow)]
pub struct ClaimedJob {
    /// The job's id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
    /// The encoded arguments.
    pub payload: String,
    /// Which attempt this claim is, starting at 1.
    pub attempts: i32,
    /// Attempts allowed in all.
    pub max_attempts: i32,
    /// The rendered dedupe key, when there is one.
    pub dedupe_key: Option<String>,
    /// The token of this claim's lease.
    pub lease_token: Uuid,
    /// Its priority.
    pub priority: i16,
    /// When it became due.
    pub run_at: DateTime<Utc>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// Seconds the job had been due (since its `run_at`) when claimed, by the database's clock:
    /// its pickup latency.
    pub waited_secs: f64,
    /// The key whose turn took it, when a claim that takes turns between keys (a fair kind's,
    /// or a per-key limited kind's) took it in a turn; `None` when it was taken oldest first.
    #[sqlx(default)]
    pub turn_key: Option<String>,
    /// The job's turn, when a claim in turn order took it (a fair kind's, or a per-key limited
    /// kind's; its key is then [`turn_key`](Self::turn_key)); `None` otherwise.
    #[sqlx(default)]
    pub fair_turn: Option<i64>,
}

impl ClaimedJob {
    /// Its place in the claim order.
    pub fn place(&self) -> ClaimPlace {
        ClaimPlace {
            priority: self.priority,
            run_at: self.run_at,
            id: self.id,
        }
    }

    /// Its place in turn order, when a claim in turn order took it.
    pub fn fair_place(&self) -> Option<FairPlace> {
        Some(FairPlace {
            priority: self.priority,
            turn: self.fair_turn?,
            key: self.turn_key.clone()?,
            id: self.id,
        })
    }

    /// How long the job had been due when claimed: its pickup latency.
    pub fn waited(&self) -> Duration {
        Duration::try_from_secs_f64(self.waited_secs.max(0.0)).unwrap_or_default()
    }
}

/// A place in the order claims take ready jobs in: priority (higher first), then `run_at`, then
/// id. Places compare in that order: the smaller is claimed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimPlace {
    /// The job's priority.
    pub priority: i16,
    /// When it became due.
    pub run_at: DateTime<Utc>,
    /// Its id.
    pub id: JobId,
}

impl ClaimPlace {
    /// What places compare by, in that order.
    fn order(&self) -> (Reverse<i16>, DateTime<Utc>, JobId) {
        (Reverse(self.priority), self.run_at, self.id)
    }
}

impl Ord for ClaimPlace {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.order().cmp(&other.order())
    }
}

impl PartialOrd for ClaimPlace {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// A place in turn order, the order a fair kind's claims, and a per-key limited kind's while no
/// key is at its limit, take the kind's ready jobs in: priority (higher first), then turn, then
/// key, then id. Places compare in that order: the smaller is claimed first.
/// Keys compare byte by byte, as the claims order them (the `C` collation), whatever the
/// database's collation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FairPlace {
    /// The job's priority.
    pub priority: i16,
    /// Its turn.
    pub turn: i64,
    /// Its turn key: its fairness key, or its limit key.
    pub key: String,
    /// Its id.
    pub id: JobId,
}

impl FairPlace {
    /// What places compare by, in that order.
    fn order(&self) -> (Reverse<i16>, i64, &str, JobId) {
        (Reverse(self.priority), self.turn, &self.key, self.id)
    }
}

impl Ord for FairPlace {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.order().cmp(&other.order())
    }
}

impl PartialOrd for FairPlace {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Claims up to `limit` ready jobs of `kinds` from `queue`, each leased for the duration that
/// `leases` gives its kind (`leases` pairs with `kinds`): from the front of the claim order, or,
/// with `after`, only jobs of the same priority after that place, and none while a job of a
/// higher priority is ready.
pub async fn claim(
    executor: impl sqlx::PgExecutor<'_>,
    queue: &str,
    kinds: &[&str],
    leases: &[Duration],
    limit: usize,
    after: Option<ClaimPlace>,
) -> Result<Vec<ClaimedJob>, sqlx::Error> {
    let count = ClaimCount {
        free: limit,
        ahead: 0,
    };
    claim_ahead(executor, queue, kinds, leases, count, after).await
}

/// How many jobs a claim takes: for the worker's free slots, and ahead of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimCount {
    /// Jobs for the free slots, to start at once.
    pub free: usize,
    /// Jobs beyond them, to wait in the worker for a slot.
    pub ahead: usize,
}

/// Claims as [`claim`] does, `count.free` jobs and up to `count.ahead` more, in claim order: the
/// jobs claimed ahead stop before the first job on its last attempt (a crash while it waited
/// for a slot would make it dead without running), which the next claim takes first. Returns
/// the jobs in claim order, the first `count.free` to start now.
pub async fn claim_ahead(
    executor: impl sqlx::PgExecutor<'_>,
    queue: &str,
    kinds: &[&str],
    leases: &[Duration],
    count: ClaimCount,
    after: Option<ClaimPlace>,
) -> Result<Vec<ClaimedJob>, sqlx::Error> {
    let limit = count.free.saturating_add(count.ahead);
    let lease_secs: Vec<f64> = leases.iter().map(Duration::as_secs_f64).collect();
    let query = match (after, kinds.len()) {
        (None, 1) => sqlx::query_as(CLAIM_ONE_KIND),
        (Some(_), 1) => sqlx::query_as(CLAIM_ONE_KIND_AFTER),
        (None, _) => sqlx::query_as(CLAIM_JOBS),
        (Some(_), _) => sqlx::query_as(CLAIM_JOBS_AFTER),
    };
    let mut query = query
        .bind(queue)
        .bind(kinds)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(lease_secs)
        .bind(i64::try_from(count.free).unwrap_or(i64::MAX));
    if let Some(place) = after {
        query = query.bind(place.priority).bind(place.run_at).bind(place.id);
    }
    let mut jobs: Vec<ClaimedJob> = query.fetch_all(executor).await?;
    // An UPDATE returns its rows in the order it reached them, not the claim's.
    jobs.sort_unstable_by_key(ClaimedJob::place);
    Ok(jobs)
}

/// What a claim of a limited kind took, and when its rate limit lets the next job start.
#[derive(Debug)]
pub struct LimitedClaim {
    /// The jobs claimed.
    pub jobs: Vec<ClaimedJob>,
    /// How long until the kind's rate limit lets a job start again, when it lets none start
    /// now; `None` when it does (or the kind has no rate limit).
    pub rate_room_in: Option<Duration>,
    /// Whether the claim took fewer jobs than asked while due jobs of the kind remained ready in
    /// queues that are not paused: a limit held them back (or other claims had them locked).
    /// Jobs that ended but whose outcomes are not yet written count against a running limit
    /// until they are.
    pub held_back: bool,
    /// Whether the claim walked the limit keys ([`claim_key_limited`]: under a per-key rate
    /// limit, while a key was at its running limit, or for what was still wanted once a claim in
    /// turn order brought one to its limit): the jobs it took that way have no place in turn
    /// order, and the next claim in turn order starts at the front, where jobs left behind come
    /// first. `false` for every other claim.
    pub walked_keys: bool,
}

impl LimitedClaim {
    /// What a claim that no limit holds back took: `jobs` alone.
    pub fn unlimited(jobs: Vec<ClaimedJob>) -> Self {
        Self {
            jobs,
            rate_room_in: None,
            held_back: false,
            walked_keys: false,
        }
    }
}

/// Claims up to `limit` ready jobs of `kind` from `queues`, each leased for `lease`, but no more
/// than leave at most `max_running` of the kind running and at most `rate_limit` started across
/// all workers. One transaction: the kind's advisory lock, the claim, and, when the claim took
/// fewer than `limit`, whether due jobs remain (held back) and, if so, when the rate limit lets
/// the next job start. The transaction is at `READ COMMITTED` ([`transactions::begin`]), so
/// `connection` must not be in a transaction already.
pub async fn claim_limited(
    connection: &mut PgConnection,
    kind: &str,
    queues: &[String],
    limit: usize,
    max_running: Option<u32>,
    rate_limit: Option<RateLimit>,
    lease: Duration,
) -> Result<LimitedClaim, sqlx::Error> {
    let mut transaction = transactions::begin(connection).await?;
    sqlx::query(LOCK_LIMITED_KIND)
        .bind(kind)
        .execute(&mut *transaction)
        .await?;
    let rate_jobs = rate_limit.map(|rate| i32::try_from(rate.jobs()).unwrap_or(i32::MAX));
    let rate_window = rate_limit.map(|rate| rate.per().as_secs_f64());
    let jobs: Vec<ClaimedJob> = sqlx::query_as(CLAIM_LIMITED_JOBS)
        .bind(kind)
        .bind(queues)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(max_running.map(i64::from))
        .bind(lease.as_secs_f64())
        .bind(rate_jobs)
        .bind(rate_window)
        .fetch_all(&mut *transaction)
        .await?;
    let (held_back, rate_room_in) =
        held_back(&mut transaction, kind, queues, limit, &jobs, rate_limit).await?;
    transaction.commit().await?;
    Ok(LimitedClaim {
        jobs,
        rate_room_in,
        held_back,
        walked_keys: false,
    })
}

/// Claims `count.free` ready jobs of `kind`, which has a fairness key, from `queue`, and up to
/// `count.ahead` more, each leased for `lease`, in the fair claim order: from its front, or,
/// with `after`, only jobs of the same priority after that place, and none while a job of a
/// higher priority is ready ([`CLAIM_FAIR_JOBS`], [`CLAIM_FAIR_JOBS_AFTER`]). The jobs claimed
/// ahead stop before the first job on its last attempt. Returns the jobs in that order, the
/// first `count.free` to start now.
///
/// When a claim from the front takes nothing, the free slots' jobs are claimed the usual way,
/// oldest first, none ahead: the jobs of the kind without a key (enqueued before the kind
/// declared one) are claimed that way, once no keyed job is due.
pub async fn claim_fair(
    connection: &mut PgConnection,
    queue: &str,
    kind: &'static str,
    lease: Duration,
    count: ClaimCount,
    after: Option<&FairPlace>,
) -> Result<Vec<ClaimedJob>, sqlx::Error> {
    let limit = count.free.saturating_add(count.ahead);
    let (mut jobs, gave_turns) =
        claim_fair_once(&mut *connection, queue, kind, lease, count, after).await?;
    if gave_turns && jobs.len() < limit {
        // The jobs just given turns come after every job the claim read: another claim from
        // where it ended takes them.
        let rest = count.after_taking(jobs.len());
        let from = jobs
            .last()
            .and_then(ClaimedJob::fair_place)
            .or_else(|| after.cloned());
        let (more, _) =
            claim_fair_once(&mut *connection, queue, kind, lease, rest, from.as_ref()).await?;
        jobs.extend(more);
    }
    if jobs.is_empty() && after.is_none() && count.free > 0 {
        return claim(&mut *connection, queue, &[kind], &[lease], count.free, None).await;
    }
    Ok(jobs)
}

/// One fair claim statement, as [`claim_fair`] describes: the jobs it took, in the fair claim
/// order, and whether it gave turns to jobs that became due without one.
async fn claim_fair_once(
    connection: &mut PgConnection,
    queue: &str,
    kind: &'static str,
    lease: Duration,
    count: ClaimCount,
    after: Option<&FairPlace>,
) -> Result<(Vec<ClaimedJob>, bool), sqlx::Error> {
    let limit = count.free.saturating_add(count.ahead);
    let query = sqlx::query(match after {
        None => CLAIM_FAIR_JOBS,
        Some(_) => CLAIM_FAIR_JOBS_AFTER,
    })
    .bind(queue)
    .bind(kind)
    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
    .bind(lease.as_secs_f64())
    .bind(i64::try_from(count.free).unwrap_or(i64::MAX));
    let rows = bind_turn_place(query, after)
        .fetch_all(&mut *connection)
        .await?;
    let turns_given: i64 = match rows.first() {
        Some(row) => row.try_get("turns_given")?,
        None => 0,
    };
    Ok((jobs_of_turn_claim(&rows)?, turns_given > 0))
}

/// `query`, a claim in turn order, with the place `after` bound as its last parameters
/// (priority, turn, key, id) when there is one.
fn bind_turn_place<'q>(
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    after: Option<&'q FairPlace>,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    match after {
        None => query,
        Some(place) => query
            .bind(place.priority)
            .bind(place.turn)
            .bind(place.key.as_str())
            .bind(place.id),
    }
}

/// The jobs among the rows of a claim in turn order, in that order (the one row of a claim that
/// took nothing has no job).
fn jobs_of_turn_claim(rows: &[sqlx::postgres::PgRow]) -> Result<Vec<ClaimedJob>, sqlx::Error> {
    let mut jobs = Vec::with_capacity(rows.len());
    for row in rows {
        if row.try_get::<Option<JobId>, _>("id")?.is_some() {
            jobs.push(ClaimedJob::from_row(row)?);
        }
    }
    // An UPDATE returns its rows in the order it reached them, not the claim's.
    jobs.sort_unstable_by_key(ClaimedJob::fair_place);
    Ok(jobs)
}

/// After a limited claim of `limit` jobs of `kind` from `queues` that took `jobs`, in its
/// transaction: whether due jobs of the kind remain that a limit held back (when the claim took
/// fewer than asked), and if so, when the kind's rate limit lets the next job start.
async fn held_back(
    transaction: &mut sqlx::PgConnection,
    kind: &str,
    queues: &[String],
    limit: usize,
    jobs: &[ClaimedJob],
    rate_limit: Option<RateLimit>,
) -> Result<(bool, Option<Duration>), sqlx::Error> {
    if jobs.len() >= limit {
        return Ok((false, None));
    }
    let held_back: bool = sqlx::query_scalar(DUE_JOBS_REMAIN)
        .bind(kind)
        .bind(queues)
        .fetch_one(&mut *transaction)
        .await?;
    let Some(rate) = rate_limit.filter(|_| held_back) else {
        return Ok((held_back, None));
    };
    let seconds: Option<f64> = sqlx::query_scalar(RATE_LIMIT_ROOM_IN)
        .bind(kind)
        .bind(i32::try_from(rate.jobs()).unwrap_or(i32::MAX))
        .bind(rate.per().as_secs_f64())
        .fetch_optional(&mut *transaction)
        .await?;
    Ok((
        held_back,
        seconds.map(|seconds| Duration::from_secs_f64(seconds.max(0.0))),
    ))
}

/// The limits of a kind, as a claim enforces them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClaimLimits {
    /// Most jobs of the kind running at once across all workers, if limited.
    pub max_running: Option<u32>,
    /// Most jobs of the kind started in any window of the limit's length, if limited.
    pub rate_limit: Option<RateLimit>,
    /// Most jobs of the kind with the same limit key running at once, if limited.
    pub max_running_per_key: Option<u32>,
    /// Most jobs of the kind with the same limit key started in any window of the limit's
    /// length, if limited.
    pub rate_limit_per_key: Option<RateLimit>,
}

/// Claims up to `count.free` ready jobs of `kind`, which has a per-key limit, from `queue`, and
/// up to `count.ahead` more, each leased for `lease`, within `limits` (the jobs claimed ahead
/// count against them from their claim: they are running), the keys taking turns. The jobs
/// claimed ahead stop before the first job on its last attempt in the claim's turn order.
/// Returns the jobs in that order, the first `count.free` to start now. Without a rate limit,
/// the claim in turn order runs first as a statement of its own ([`sole_claim!`]), which is the
/// whole claim when it had the kind to itself, every key read had room for its jobs, and it needs
/// nothing after it; otherwise, one
/// transaction: the kind's advisory lock, the claim, and, when the claim left free slots empty,
/// whether due jobs remain (held back) and, if so, when the kind's rate limit lets the next job
/// start. The jobs of a statement of its own that the transaction after it goes on from are
/// claimed whatever becomes of the transaction.
///
/// Without a per-key rate limit, and while no key is at its running limit (as the last claim
/// statement found, which `round` keeps: while keys are, the claims walk the keys without
/// trying turn order first), the claim reads the jobs in turn order ([`CLAIM_KEY_TURNS`] alone,
/// [`CLAIM_KEY_TURNS_TO_LIMIT`] in the transaction), after
/// `round`'s
/// [`turn_place`](KeyRound::turn_place) or from the front. Otherwise, and for what is still
/// wanted when that claim brought a key to its limit, it walks the limit keys with room
/// ([`CLAIM_KEY_LIMITED_JOBS`]), going on after `round`'s cursor (the key of the last job the
/// previous walk took), which it moves to the key of the last job this walk takes; the claim
/// then says so ([`LimitedClaim::walked_keys`]).
///
/// Jobs of the kind without a limit key (enqueued before the kind declared one, or by a version
/// of the application that did not declare it) are claimed for the free slots, within the
/// kind's own limits, when the claim took nothing and no job with a key is due, and otherwise
/// by a claim that came back short at most every `round`'s interval: looking for them walks the
/// ready index past the kind's keyed jobs, a cost paid at most that often.
///
/// Its transactions are at `READ COMMITTED` ([`transactions::begin`]), so `connection` must not
/// be in a transaction already.
pub async fn claim_key_limited(
    connection: &mut PgConnection,
    kind: &str,
    queue: &str,
    count: ClaimCount,
    limits: ClaimLimits,
    lease: Duration,
    round: &mut KeyRound,
) -> Result<LimitedClaim, sqlx::Error> {
    let claim = KeyClaim {
        kind,
        queue,
        limits,
        lease,
    };
    let in_turns = limits.rate_limit_per_key.is_none() && !round.walks_keys();
    // Without a rate limit, the claim in turn order goes first as a statement of its own, which
    // claims only when it has the kind to itself; when it is all the claim needs, it is the whole
    // claim, and otherwise a transaction claims the rest after it.
    let mut sole = None;
    if in_turns && limits.rate_limit.is_none() {
        if let Some(by_turns) = claim.by_turns_alone(&mut *connection, count, round).await? {
            round.keys_at_limit = by_turns.keys_at_limit;
            if by_turns.is_whole_claim(count) {
                return Ok(LimitedClaim::unlimited(by_turns.jobs));
            }
            sole = Some(by_turns);
        }
    }
    // The jobs it took come first; should the transaction fail, they are claimed all the same.
    let mut jobs: Vec<ClaimedJob> = Vec::new();
    let sole = sole.map(|mut by_turns| {
        jobs = std::mem::take(&mut by_turns.jobs);
        by_turns
    });
    let committed = jobs.len();
    let claimed = claim
        .in_transaction(connection, count, round, sole, in_turns, &mut jobs)
        .await;
    match claimed {
        Ok((walked_keys, held_back, rate_room_in)) => Ok(LimitedClaim {
            jobs,
            rate_room_in,
            held_back,
            walked_keys,
        }),
        // The jobs the statement of its own took are claimed, whatever became of the rest.
        Err(error) if committed > 0 => {
            tracing::warn!(kind, %error, "claiming after a claim in turn order failed");
            jobs.truncate(committed);
            Ok(LimitedClaim::unlimited(jobs))
        }
        Err(error) => Err(error),
    }
}

impl ClaimCount {
    /// What is still wanted once `taken` jobs were claimed: the free slots first.
    fn after_taking(self, taken: usize) -> ClaimCount {
        let free = self.free.saturating_sub(taken);
        let limit = self.free.saturating_add(self.ahead);
        ClaimCount {
            free,
            ahead: limit.saturating_sub(taken).saturating_sub(free),
        }
    }
}

/// A claim of a kind with a per-key limit, as [`claim_key_limited`] makes it.
struct KeyClaim<'a> {
    /// The kind.
    kind: &'a str,
    /// The queue.
    queue: &'a str,
    /// Its limits.
    limits: ClaimLimits,
    /// Its lease.
    lease: Duration,
}

/// Which of the jobs it read a claim in turn order of a kind with a per-key limit takes when a
/// key read has no room for all of its.
#[derive(Debug, Clone, Copy)]
enum TurnsTaken {
    /// None ([`CLAIM_KEY_TURNS`]): a statement of its own while the reads fit.
    AllOrNone,
    /// Those before the first job whose key has no room left ([`CLAIM_KEY_TURNS_TO_LIMIT`]): a
    /// statement of its own while they do not, and the claim in a transaction.
    UpToLimit,
}

/// What one claim in turn order of a kind with a per-key limit took ([`CLAIM_KEY_TURNS`],
/// [`CLAIM_KEY_TURNS_TO_LIMIT`]).
struct KeyTurns {
    /// The jobs, in turn order.
    jobs: Vec<ClaimedJob>,
    /// Whether it gave turns to jobs that became due without one.
    turns_given: bool,
    /// How many keys were at their running limit: when not 0, it read nothing.
    keys_at_limit: i64,
    /// Whether it left a job it read for want of room under its key's limit: a claim up to the
    /// first such job stopped there ([`CLAIM_KEY_TURNS_TO_LIMIT`]); one of all the jobs read or
    /// none took none ([`CLAIM_KEY_TURNS`]).
    stopped_at_limit: bool,
    /// Whether it had the kind to itself, and so may have claimed ([`sole_claim!`]): when not,
    /// it took nothing, and the rest says nothing.
    sole: bool,
}

impl KeyTurns {
    /// Whether, claiming for `count`, it is all the claim needs: no key was at its limit, it
    /// filled the free slots, and it left no room that another claim would fill (past the jobs it
    /// gave turns, or, for the free slots, by walking the keys).
    fn is_whole_claim(&self, count: ClaimCount) -> bool {
        self.keys_at_limit == 0
            && self.jobs.len() >= count.free
            && !self.leaves_turns_given(self.jobs.len(), count)
    }

    /// Whether, once `taken` jobs were claimed for `count`, another claim in turn order from
    /// where it ended would take more: it gave turns to jobs (which come after every job it read)
    /// and stopped neither at a key's limit nor for want of room.
    fn leaves_turns_given(&self, taken: usize, count: ClaimCount) -> bool {
        self.turns_given && !self.stopped_at_limit && taken < count.free.saturating_add(count.ahead)
    }
}

impl KeyClaim<'_> {
    /// The claim of [`claim_key_limited`] in a transaction that holds the kind's lock, onto
    /// `jobs`: by turns when `in_turns` (going on from `sole`, the claim in turn order already
    /// made and committed, when there is one, whose jobs are in `jobs` already), walking the keys otherwise or for the free slots a
    /// key's limit left empty, then the jobs without a key, and whether jobs were held back.
    /// Returns whether it walked the keys, whether jobs were held back, and when the kind's rate
    /// limit lets the next job start.
    async fn in_transaction(
        &self,
        connection: &mut PgConnection,
        count: ClaimCount,
        round: &mut KeyRound,
        sole: Option<KeyTurns>,
        in_turns: bool,
        jobs: &mut Vec<ClaimedJob>,
    ) -> Result<(bool, bool, Option<Duration>), sqlx::Error> {
        let mut transaction = transactions::begin(connection).await?;
        sqlx::query(LOCK_LIMITED_KIND)
            .bind(self.kind)
            .execute(&mut *transaction)
            .await?;
        let mut walk = true;
        if in_turns {
            let by_turns = match sole {
                Some(by_turns) => by_turns,
                None => {
                    self.by_turns(
                        &mut transaction,
                        count,
                        round.turn_place.as_ref(),
                        TurnsTaken::UpToLimit,
                    )
                    .await?
                }
            };
            round.keys_at_limit = by_turns.keys_at_limit;
            if by_turns.keys_at_limit == 0 {
                let mut at_limit = by_turns.stopped_at_limit;
                let goes_on = by_turns.leaves_turns_given(jobs.len() + by_turns.jobs.len(), count);
                jobs.extend(by_turns.jobs);
                if goes_on {
                    // The jobs just given turns come after every job the claim read: another
                    // claim from where it ended takes them.
                    let from = jobs
                        .last()
                        .and_then(ClaimedJob::fair_place)
                        .or_else(|| round.turn_place.clone());
                    let more = self
                        .by_turns(
                            &mut transaction,
                            count.after_taking(jobs.len()),
                            from.as_ref(),
                            TurnsTaken::UpToLimit,
                        )
                        .await?;
                    round.keys_at_limit = more.keys_at_limit;
                    at_limit = more.keys_at_limit > 0 || more.stopped_at_limit;
                    jobs.extend(more.jobs);
                }
                // A key the claims brought to its limit stopped them: the keys are walked for
                // the free slots still empty.
                walk = at_limit && jobs.len() < count.free;
            }
        }
        if walk {
            self.walking_keys(&mut transaction, count, round, jobs)
                .await?;
        }
        if jobs.len() < count.free {
            self.unkeyed(&mut transaction, count, round, jobs).await?;
        }
        let (held_back, rate_room_in) = held_back(
            &mut transaction,
            self.kind,
            &[self.queue.to_owned()],
            count.free,
            jobs,
            self.limits.rate_limit,
        )
        .await?;
        transaction.commit().await?;
        Ok((walk, held_back, rate_room_in))
    }

    /// The kind's rate limit, as the claims bind it: jobs, and the window's seconds.
    fn rate(&self) -> (Option<i32>, Option<f64>) {
        let rate = self.limits.rate_limit;
        (
            rate.map(|rate| i32::try_from(rate.jobs()).unwrap_or(i32::MAX)),
            rate.map(|rate| rate.per().as_secs_f64()),
        )
    }

    /// Most jobs of a key running at once, as the claims bind it (no limit: the most there is).
    fn per_key(&self) -> i64 {
        self.limits.max_running_per_key.map_or(i64::MAX, i64::from)
    }

    /// The claim in turn order as a statement of its own, from `round`'s place, when it had the
    /// kind to itself (`None` otherwise): while `round`'s reads fit, one that takes all the jobs
    /// it reads or none; when a key read has no room for all of its, and then until a read fits
    /// again, one that takes them up to the first job without room (which a statement of all or
    /// none would spend a round trip on taking none). Notes in `round` whether its read fit.
    async fn by_turns_alone(
        &self,
        connection: &mut PgConnection,
        count: ClaimCount,
        round: &mut KeyRound,
    ) -> Result<Option<KeyTurns>, sqlx::Error> {
        let place = round.turn_place.as_ref();
        if round.reads_fit {
            let all_or_none = self
                .by_turns(connection, count, place, TurnsTaken::AllOrNone)
                .await?;
            if !all_or_none.sole {
                return Ok(None);
            }
            if !all_or_none.stopped_at_limit {
                return Ok(Some(all_or_none));
            }
            round.reads_fit = false;
        }
        let up_to_limit = self
            .by_turns(connection, count, place, TurnsTaken::UpToLimit)
            .await?;
        if !up_to_limit.sole {
            return Ok(None);
        }
        round.reads_fit = !up_to_limit.stopped_at_limit;
        Ok(Some(up_to_limit))
    }

    /// One claim in turn order, from the front or `after` a place, taking the jobs it read as
    /// `taken` says.
    async fn by_turns(
        &self,
        transaction: &mut PgConnection,
        count: ClaimCount,
        after: Option<&FairPlace>,
        taken: TurnsTaken,
    ) -> Result<KeyTurns, sqlx::Error> {
        let limit = count.free.saturating_add(count.ahead);
        let (rate_jobs, rate_window) = self.rate();
        let query = sqlx::query(match (taken, after) {
            (TurnsTaken::AllOrNone, None) => CLAIM_KEY_TURNS,
            (TurnsTaken::AllOrNone, Some(_)) => CLAIM_KEY_TURNS_AFTER,
            (TurnsTaken::UpToLimit, None) => CLAIM_KEY_TURNS_TO_LIMIT,
            (TurnsTaken::UpToLimit, Some(_)) => CLAIM_KEY_TURNS_TO_LIMIT_AFTER,
        })
        .bind(self.kind)
        .bind(self.queue)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(self.limits.max_running.map(i64::from))
        .bind(self.lease.as_secs_f64())
        .bind(rate_jobs)
        .bind(rate_window)
        .bind(self.per_key())
        .bind(i64::try_from(count.free).unwrap_or(i64::MAX));
        let rows = bind_turn_place(query, after)
            .fetch_all(&mut *transaction)
            .await?;
        let Some(row) = rows.first() else {
            return Err(sqlx::Error::RowNotFound);
        };
        Ok(KeyTurns {
            turns_given: row.try_get::<i64, _>("turns_given")? > 0,
            keys_at_limit: row.try_get("keys_at_limit")?,
            stopped_at_limit: row.try_get("stopped_at_limit")?,
            sole: row.try_get("sole")?,
            jobs: jobs_of_turn_claim(&rows)?,
        })
    }

    /// Claims walking the limit keys with room ([`CLAIM_KEY_LIMITED_JOBS`]), after `jobs` were
    /// claimed, for the rest of `count`, onto `jobs`: rounds until the free slots are filled (one
    /// at least: a claim with no free slot takes jobs ahead alone) or a round takes nothing. A
    /// round whose keys could not use their whole share leaves room for the next. Each round
    /// counts this transaction's own claims, so the limits hold across rounds. Jobs ahead that
    /// a round did not find (its keys could not use their share, or it stopped at a job on its
    /// last attempt) are not looked for again.
    async fn walking_keys(
        &self,
        transaction: &mut PgConnection,
        count: ClaimCount,
        round: &mut KeyRound,
        jobs: &mut Vec<ClaimedJob>,
    ) -> Result<(), sqlx::Error> {
        let limit = count.free.saturating_add(count.ahead);
        let (rate_jobs, rate_window) = self.rate();
        let key_rate = self.limits.rate_limit_per_key;
        loop {
            let free = count.free.saturating_sub(jobs.len());
            let rows = sqlx::query(CLAIM_KEY_LIMITED_JOBS)
                .bind(self.kind)
                .bind(self.queue)
                .bind(i64::try_from(limit.saturating_sub(jobs.len())).unwrap_or(i64::MAX))
                .bind(self.limits.max_running.map(i64::from))
                .bind(self.lease.as_secs_f64())
                .bind(rate_jobs)
                .bind(rate_window)
                .bind(self.per_key())
                .bind(round.cursor.as_deref())
                .bind(key_rate.map(|rate| i32::try_from(rate.jobs()).unwrap_or(i32::MAX)))
                .bind(key_rate.map(|rate| rate.per().as_secs_f64()))
                .bind(i64::try_from(free).unwrap_or(i64::MAX))
                .fetch_all(&mut *transaction)
                .await?;
            let before = jobs.len();
            for row in &rows {
                // The one row of a claim that took nothing has no job.
                if row.try_get::<Option<JobId>, _>("id")?.is_some() {
                    jobs.push(ClaimedJob::from_row(row)?);
                }
            }
            // A round that took nothing for no free slot may have stopped before a job on its
            // last attempt, of a key with room: the round stays where it was, for a claim with
            // free slots to take it in its turn. (With free slots, a round that took nothing
            // found no key with room and a job, and the next one goes on past the keys it
            // visited.)
            if let Some(row) = rows.first().filter(|_| jobs.len() > before || free > 0) {
                round.cursor = row.try_get("key_cursor")?;
            }
            if let Some(row) = rows.first() {
                round.keys_at_limit = row.try_get("keys_at_limit")?;
            }
            if jobs.len() == before || jobs.len() >= count.free {
                return Ok(());
            }
        }
    }

    /// After a claim that left free slots of `count` empty, with `jobs`: claims the kind's jobs
    /// without a limit key for them, within the kind's own limits, when the claim took nothing
    /// and no job with a key is due, or when `round` is due a look for them (see
    /// [`claim_key_limited`]).
    async fn unkeyed(
        &self,
        transaction: &mut PgConnection,
        count: ClaimCount,
        round: &mut KeyRound,
        jobs: &mut Vec<ClaimedJob>,
    ) -> Result<(), sqlx::Error> {
        let look_for_unkeyed = if round.unkeyed_look_due() {
            true
        } else if jobs.is_empty() {
            let keyed_due: bool = sqlx::query_scalar(KEYED_JOBS_DUE)
                .bind(self.kind)
                .bind(self.queue)
                .fetch_one(&mut *transaction)
                .await?;
            !keyed_due
        } else {
            false
        };
        if !look_for_unkeyed {
            return Ok(());
        }
        round.unkeyed_looked();
        let (rate_jobs, rate_window) = self.rate();
        let unkeyed: Vec<ClaimedJob> = sqlx::query_as(CLAIM_UNKEYED_LIMITED_JOBS)
            .bind(self.kind)
            .bind([self.queue])
            .bind(i64::try_from(count.free.saturating_sub(jobs.len())).unwrap_or(i64::MAX))
            .bind(self.limits.max_running.map(i64::from))
            .bind(self.lease.as_secs_f64())
            .bind(rate_jobs)
            .bind(rate_window)
            .fetch_all(&mut *transaction)
            .await?;
        jobs.extend(unkeyed);
        Ok(())
    }
}

/// Where a producer of a kind with a per-key limit stands between claims: where its claims in
/// turn order go on, the key its last walk of the keys ended at, whether a key was at its limit,
/// and when it last looked for the kind's jobs without a key.
#[derive(Debug)]
pub struct KeyRound {
    /// The place in turn order the next claim in turn order goes on after (`None`: from the
    /// front), set by the producer before each claim.
    pub turn_place: Option<FairPlace>,
    /// The key the next walk of the keys goes on after: that of the last job the last walk took,
    /// or, after a hand-back, of the last job that started.
    pub cursor: Option<String>,
    /// How many keys were at their running limit when the last claim statement began: while
    /// any were, the claims walk the keys without trying turn order first.
    keys_at_limit: i64,
    /// Whether the last claim in turn order of its own found room for every job it read (see
    /// [`KeyClaim::by_turns_alone`]).
    reads_fit: bool,
    /// How often a claim that came back short looks for jobs without a key, at most.
    unkeyed_every: Duration,
    /// When one last did.
    unkeyed_looked_at: Instant,
}

impl KeyRound {
    /// A producer's first round, looking for jobs without a key at most every `unkeyed_every`
    /// when its claims come back short (and whenever no job with a key is due).
    pub fn new(unkeyed_every: Duration) -> Self {
        Self {
            turn_place: None,
            cursor: None,
            keys_at_limit: 0,
            reads_fit: true,
            unkeyed_every,
            unkeyed_looked_at: Instant::now(),
        }
    }

    /// The jobs claimed after the last that started were handed back, ready again; `last_started`
    /// is the [`turn_key`](ClaimedJob::turn_key) of the last job taken in a turn that started
    /// (`None` when none has). The next walk of the keys goes on after it, so that the keys whose jobs were
    /// handed back get their turns first, as they had them (with any key passed over or come in
    /// between, in ring order). Jobs start in the order they were claimed, so every job taken in
    /// a turn after that one was handed back (or passed over, its lease lost), whichever claims
    /// took them.
    pub fn handed_back(&mut self, last_started: Option<String>) {
        self.cursor = last_started;
    }

    /// Whether the claims walk the keys: a key was at its running limit when the last claim
    /// statement began.
    pub fn walks_keys(&self) -> bool {
        self.keys_at_limit > 0
    }

    fn unkeyed_look_due(&self) -> bool {
        self.unkeyed_looked_at.elapsed() >= self.unkeyed_every
    }

    fn unkeyed_looked(&mut self) {
        self.unkeyed_looked_at = Instant::now();
    }
}
