//! Reaching the database: the worker's first connection, and the real cause of a failure the
//! pool reports as a timeout.
//!
//! sqlx's pool retries a refused connection until its acquire timeout (30 s by default) and then
//! reports `PoolTimedOut`, hiding the cause: a wrong port looks like a slow database. A direct
//! connection, outside the pool, fails at once with the cause ("Connection refused", a failed
//! authentication, a missing database).

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, PgPool};
use tokio::sync::watch;
use tokio_util::task::TaskTracker;

use crate::backoff::ReconnectBackoff;

/// Longest a direct connection made to explain a pool timeout may take.
const EXPLAIN_WITHIN: Duration = Duration::from_secs(5);

/// How often a shutdown that does not settle looks whether the database is reachable.
const OUTAGE_CHECK_EVERY: Duration = Duration::from_millis(250);

/// Checks now that the database of `pool` accepts a connection, and says why not: an idle
/// connection of the pool that answers a ping is enough (one that does not is closed);
/// otherwise one connection is opened outside the pool (and closed), within the pool's acquire
/// timeout.
///
/// Call it before the first statement of a process (`jobs::migrate`, say) to report a wrong
/// address or port at once, as "Connection refused", instead of `PoolTimedOut` 30 s later. A
/// worker does it by itself when it starts.
pub async fn check_connection(pool: &PgPool) -> Result<(), sqlx::Error> {
    let within = pool.options().get_acquire_timeout();
    if let Some(mut idle) = pool.try_acquire() {
        if let Ok(Ok(())) = tokio::time::timeout(within, idle.ping()).await {
            return Ok(());
        }
        idle.close_on_drop();
    }
    connect_directly(pool, within).await
}

/// One connection to the database of `pool`, outside the pool, closed at once; an error
/// `TimedOut` when it takes longer than `within`.
async fn connect_directly(pool: &PgPool, within: Duration) -> Result<(), sqlx::Error> {
    let options = pool.connect_options();
    match tokio::time::timeout(within, PgConnection::connect_with(&options)).await {
        Ok(Ok(connection)) => {
            let _ = connection.close().await;
            Ok(())
        }
        Ok(Err(error)) => Err(error),
        Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {within:?}"),
        ))),
    }
}

/// `error`, or when it is the pool's `PoolTimedOut` and a direct connection fails, the error of
/// that connection: the cause the pool hid.
pub(crate) async fn explain(pool: &PgPool, error: sqlx::Error) -> sqlx::Error {
    if !matches!(error, sqlx::Error::PoolTimedOut) {
        return error;
    }
    match connect_directly(pool, EXPLAIN_WITHIN).await {
        Err(cause) => cause,
        Ok(()) => error,
    }
}

/// `host:port/database`, never the credentials.
pub(crate) fn describe(options: &PgConnectOptions) -> String {
    format!(
        "{}:{}/{}",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or(options.get_username())
    )
}

/// Waits until the database of `pool` accepts a connection, trying again with growing delays
/// (up to `max_delay`). The first failure is logged as an error with its cause, later ones
/// only when the cause changes. Returns the last failure, if any, when `stop` turns true (or its
/// sender is gone) first.
pub(crate) async fn first_connection(
    pool: &PgPool,
    max_delay: Duration,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), Option<sqlx::Error>> {
    let database = describe(&pool.connect_options());
    let mut backoff = ReconnectBackoff::new(max_delay);
    let mut last: Option<sqlx::Error> = None;
    loop {
        let attempt = tokio::select! {
            attempt = check_connection(pool) => attempt,
            _ = stop.wait_for(|stop| *stop) => return Err(last),
        };
        let error = match attempt {
            Ok(()) => {
                if last.is_some() {
                    tracing::info!(%database, "the database answers; starting the worker");
                }
                return Ok(());
            }
            Err(error) => error,
        };
        let delay = backoff.next_delay();
        match &last {
            None => tracing::error!(
                %database,
                %error,
                "cannot reach the database; the worker starts once it answers (retrying)"
            ),
            Some(previous) if previous.to_string() != error.to_string() => tracing::error!(
                %database,
                %error,
                "still cannot reach the database, now for another reason (retrying)"
            ),
            Some(_) => {
                tracing::debug!(%database, %error, ?delay, "the database still does not answer")
            }
        }
        last = Some(error);
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = stop.wait_for(|stop| *stop) => return Err(last),
        }
    }
}

/// Resolves once no executor of `executors` runs and the server of `pool` cannot be reached at
/// all (the connection fails below the protocol: refused, reset, unreachable, no answer; a
/// server that answers with an error, such as "too many clients", is reachable). Looks every
/// [`OUTAGE_CHECK_EVERY`], first after one period: a shutdown that settles by then never asks.
pub(crate) async fn outage_with_nothing_running(pool: &PgPool, executors: &TaskTracker) {
    loop {
        tokio::time::sleep(OUTAGE_CHECK_EVERY).await;
        if !executors.is_empty() {
            continue;
        }
        if let Err(sqlx::Error::Io(_) | sqlx::Error::Tls(_)) = check_connection(pool).await {
            if executors.is_empty() {
                return;
            }
        }
    }
}
