//! The backend's one way to the database: every statement, beside the function that binds it,
//! split by table or concern. Nothing else in the crate runs SQL.
//!
//! Times come from the database clock (`now()`), durations are passed as seconds (`float8`),
//! and every write to a running job is fenced by its lease token.

/// The channel on which enqueue announces ready work; the payload is the queue name.
pub const NOTIFY_CHANNEL: &str = "jobs_queue";

/// The advisory lock key of queue `$queue` (an SQL expression) that workers hold while they
/// watch the queue for work (see [`watch`]).
macro_rules! queue_watch_key {
    ($queue:literal) => {
        concat!("hashtextextended('jobs_watch:' || ", $queue, ", 0)")
    };
}

/// The condition that a worker watches queue `$queue` (an SQL expression) for work, so that
/// enqueue announces ready work in it (see [`watch`]): true when the queue's watch lock is held
/// or asked for. When it is neither, the condition takes the lock in share mode until the
/// transaction ends, so a worker that starts watching waits for this transaction to end before
/// it claims, and finds its jobs.
macro_rules! watched {
    ($queue:literal) => {
        concat!(
            "NOT pg_try_advisory_xact_lock_shared(",
            queue_watch_key!($queue),
            ")"
        )
    };
}

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

/// A condition that the dedupe key in column `$held` equals the key `$wanted`, written so that
/// the planner probes a dedupe index: digests compared first (the index's expression), then
/// the keys themselves.
macro_rules! same_dedupe_key {
    ($held:literal, $wanted:literal) => {
        concat!(
            dedupe_digest!($held),
            " = ",
            dedupe_digest!($wanted),
            " AND ",
            $held,
            " = ",
            $wanted
        )
    };
}

/// The states of a pending job, one that has not ended: `waiting` (for prerequisites), `ready`
/// (due or scheduled) and `running`. An `active` dedupe key holds in these states (the unique
/// index `jobs_queue_dedupe_active` has this predicate), and an operator's cancel takes them.
macro_rules! pending_states {
    () => {
        "('waiting', 'ready', 'running')"
    };
}

/// The common table expression `workflow_steps`, which moves on the workflows of the jobs a
/// statement ended or re-opened: the rows of `$rows` (a common table expression of the same
/// statement with columns `id`, `batch_id`, `has_dependents` and the new `state`) that have
/// dependents or a batch, with `$was` their state before the statement (an SQL expression),
/// handed to `jobs_workflow_steps` (migration 17) in one call; plain jobs hand nothing over and
/// the function is not called.
///
/// The statement's main query must read it (`WHERE (SELECT count(*) FROM workflow_steps) >= 0`):
/// PostgreSQL runs a query's common table expressions that change nothing only when they are
/// read. Its aggregate reads every row of `$rows` before the call, so the call comes after all
/// of the statement's writes to `jobs_queue`, as it must (a statement's update of a row that a
/// function it called has already updated is refused).
macro_rules! workflow_steps {
    ($rows:literal, $was:literal) => {
        concat!(
            "workflow_steps AS (
    SELECT jobs_workflow_steps(array_agg(id), array_agg(batch_id), array_agg(has_dependents),
                               array_agg(",
            $was,
            "), array_agg(state))
    FROM ",
            $rows,
            "
    WHERE has_dependents OR batch_id IS NOT NULL
    HAVING count(*) > 0
)"
        )
    };
}

/// The condition that makes a statement's main query read [`workflow_steps!`] first.
macro_rules! after_workflow_steps {
    () => {
        "(SELECT count(*) FROM workflow_steps) >= 0"
    };
}

pub(crate) mod batches;
pub(crate) mod cancel;
pub(crate) mod claims;
pub(crate) mod copy;
#[cfg(feature = "testing")]
pub(crate) mod databases;
pub(crate) mod dead;
pub(crate) mod dependencies;
pub(crate) mod enqueue;
pub(crate) mod find;
pub(crate) mod migrations;
pub(crate) mod outbox;
pub(crate) mod outcomes;
pub(crate) mod outputs;
pub(crate) mod pauses;
pub(crate) mod processed;
pub(crate) mod rescue;
pub(crate) mod retention;
pub(crate) mod schedules;
pub(crate) mod stats;
#[cfg(feature = "testing")]
pub(crate) mod testing;
pub(crate) mod throughput;
pub(crate) mod transactions;
pub(crate) mod waiting;
pub(crate) mod watch;
pub(crate) mod workers;
pub(crate) mod workflows;

pub(crate) use claims::{
    claim_ahead, claim_fair, claim_key_limited, claim_limited, ClaimCount, ClaimLimits, ClaimPlace,
    ClaimedJob, FairPlace, KeyRound, LimitedClaim,
};
pub(crate) use outcomes::{heartbeat, record_outcomes, Fenced, Outcome, RenewedLease};
pub(crate) use rescue::{list_expired, rescue_expired, rescue_jobs, ExpiredJob, RescuedJob};
pub(crate) use schedules::{schedule_pass, upsert_schedule, Registration};
