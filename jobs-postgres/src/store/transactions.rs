//! The isolation `jobs` runs at: `READ COMMITTED`, each statement reading what has committed
//! before it starts.
//!
//! The transactions this crate opens for itself and that read after taking a lock (claims of
//! limited kinds, scheduling passes, retention, the outbox relay, migrations, schedule removal)
//! begin at `READ COMMITTED` whatever the database's or role's `default_transaction_isolation`
//! says. Under `REPEATABLE READ` or `SERIALIZABLE` a transaction reads from the snapshot of its
//! first statement, taken before the wait for the lock: a claim of a limited kind would count
//! the running jobs without those a claim started while it waited (and take jobs past a limit),
//! or fail with a serialization error on its own count.
//!
//! The statements a worker runs on their own (claims, heartbeats, outcomes, rescues) take the
//! connections' default, so a worker checks it when it starts ([`default_isolation`]). The
//! transactions a caller opens (enqueue in the caller's transaction, a job's own transaction)
//! keep the caller's isolation.

use sqlx::{Connection, PgConnection, PgPool, Postgres, Transaction};

/// Begins a transaction at `READ COMMITTED`.
pub const BEGIN_READ_COMMITTED: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// The isolation a connection's transactions and statements of their own run at unless told
/// otherwise (`read committed`, `repeatable read`, ...).
pub const DEFAULT_ISOLATION: &str = "SELECT current_setting('default_transaction_isolation')";

/// Begins a transaction at `READ COMMITTED` on `connection`, which must not be in a
/// transaction already (sqlx refuses a savepoint with an isolation level).
pub(crate) async fn begin(
    connection: &mut PgConnection,
) -> Result<Transaction<'_, Postgres>, sqlx::Error> {
    connection.begin_with(BEGIN_READ_COMMITTED).await
}

/// Begins a transaction at `READ COMMITTED` on a connection of `pool`.
pub(crate) async fn begin_on(pool: &PgPool) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    pool.begin_with(BEGIN_READ_COMMITTED).await
}

/// The default isolation of a connection of `pool` ([`DEFAULT_ISOLATION`]).
pub(crate) async fn default_isolation(pool: &PgPool) -> Result<String, sqlx::Error> {
    sqlx::query_scalar(DEFAULT_ISOLATION).fetch_one(pool).await
}

/// Whether `isolation` (as [`DEFAULT_ISOLATION`] names it) reads what has committed before each
/// statement: `read committed`, and `read uncommitted`, which PostgreSQL runs as it.
pub(crate) fn reads_each_commit(isolation: &str) -> bool {
    matches!(isolation, "read committed" | "read uncommitted")
}
