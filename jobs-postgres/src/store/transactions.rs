//! The transactions this crate opens for itself (claims under a kind's lock, scheduling passes,
//! retention, the outbox relay, migrations, schedule removal), at `READ COMMITTED` whatever the
//! database's or role's `default_transaction_isolation` says.
//!
//! Each of them takes a lock, then reads what the holder before it wrote: a claim of a limited
//! kind counts the jobs running once it holds the kind's lock. Under `REPEATABLE READ` or
//! `SERIALIZABLE` a transaction reads from the snapshot of its first statement, taken before the
//! wait for the lock: a claim would count the running jobs without those a claim started while
//! it waited, and take jobs past a limit. At `READ COMMITTED` each statement reads what has
//! committed before it starts.
//!
//! The transactions a caller opens (enqueue in the caller's transaction, a job's own
//! transaction) keep the caller's isolation.

use sqlx::{Connection, PgConnection, PgPool, Postgres, Transaction};

/// Begins a transaction at `READ COMMITTED`.
pub const BEGIN_READ_COMMITTED: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// Begins a transaction at `READ COMMITTED` on `connection`.
pub(crate) async fn begin(
    connection: &mut PgConnection,
) -> Result<Transaction<'_, Postgres>, sqlx::Error> {
    connection.begin_with(BEGIN_READ_COMMITTED).await
}

/// Begins a transaction at `READ COMMITTED` on a connection of `pool`.
pub(crate) async fn begin_on(pool: &PgPool) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    pool.begin_with(BEGIN_READ_COMMITTED).await
}
