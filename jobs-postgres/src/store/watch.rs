//! Watching a queue for work: enqueue announces ready work with `NOTIFY` only while a worker
//! waits for the queue's work, which the worker shows by holding the queue's watch lock (an
//! advisory lock, [`queue_watch_key!`]) on a session of its own.
//!
//! `NOTIFY` serializes the commits of every transaction that sends one, across the whole
//! cluster, each until its commit is flushed; enqueue pays it only when it wakes someone.
//!
//! Why no wake-up is lost: an enqueue that finds the lock neither held nor asked for (the
//! [`watched!`] condition) takes it in share mode until its transaction ends, and sends nothing.
//! A worker that runs out of work asks for the lock in exclusive mode; PostgreSQL grants it
//! only once every transaction holding it in share mode has ended, committed or not, and then
//! the worker claims again, finding the jobs those transactions enqueued. From the request on,
//! an enqueue's try for the share lock fails (a share request conflicts with an exclusive one
//! held or waiting), so it sends `NOTIFY`, which reaches the worker when the enqueue commits.

use sqlx::PgConnection;

/// Sets up a session that holds watch locks: its requests wait as long as it takes (no
/// `lock_timeout` or `statement_timeout` a role or database may set: a request given up would
/// leave the queue unwatched, and enqueue silent, until the next one), and it stays open while
/// idle (no `idle_session_timeout`).
pub const WATCH_SESSION: &str = "
SELECT set_config('lock_timeout', '0', false),
       set_config('statement_timeout', '0', false),
       set_config('idle_session_timeout', '0', false),
       set_config('idle_in_transaction_session_timeout', '0', false)";

/// Has PostgreSQL check the session's client every second while it waits for a lock: should
/// the worker go away, the request is let go (otherwise a request left waiting would keep every
/// enqueue of the queue announcing, and a grant would hold the lock). Servers on platforms
/// without the check (it needs Linux) refuse the setting; the session works without it.
pub const CHECK_CLIENT: &str =
    "SELECT set_config('client_connection_check_interval', '1000', false)";

/// Takes queue `$1`'s watch lock in exclusive mode, for the session, waiting until every
/// enqueue that found the queue unwatched has ended.
pub const WATCH_QUEUE: &str = concat!("SELECT pg_advisory_lock(", queue_watch_key!("$1"), ")");

/// Lets queue `$1`'s watch lock go: enqueue stops announcing unless another worker watches.
pub const UNWATCH_QUEUE: &str = concat!("SELECT pg_advisory_unlock(", queue_watch_key!("$1"), ")");

/// Prepares `session` to hold watch locks ([`WATCH_SESSION`], and [`CHECK_CLIENT`] where the
/// server has it).
pub async fn set_up_session(session: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query(WATCH_SESSION).execute(&mut *session).await?;
    if let Err(error) = sqlx::query(CHECK_CLIENT).execute(&mut *session).await {
        tracing::debug!(%error, "the server does not check a watch session's client");
    }
    Ok(())
}

/// Watches `queue` on `session`: returns once the lock is held, which is after every enqueue
/// that found the queue unwatched has ended.
pub async fn watch_queue(session: &mut PgConnection, queue: &str) -> Result<(), sqlx::Error> {
    sqlx::query(WATCH_QUEUE)
        .bind(queue)
        .execute(session)
        .await?;
    Ok(())
}

/// Stops watching `queue` on `session`.
pub async fn unwatch_queue(session: &mut PgConnection, queue: &str) -> Result<(), sqlx::Error> {
    sqlx::query(UNWATCH_QUEUE)
        .bind(queue)
        .execute(session)
        .await?;
    Ok(())
}

/// Checks that `session` still answers, and so still holds its locks.
pub async fn still_holding(session: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT 1").execute(session).await?;
    Ok(())
}
