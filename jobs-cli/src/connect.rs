//! Connecting to the database named by `--database-url` or `DATABASE_URL`.

use std::str::FromStr;
use std::time::Duration;

use jobs_postgres::admin::HumanDuration;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};

use crate::error::CliError;

/// Connections the tool uses at most.
const POOL_SIZE: u32 = 2;

/// A small pool to the database at `url`, after one connection proved it reachable within
/// `timeout` (so that a refused connection says so at once, instead of a pool timing out).
pub async fn connect(url: Option<&str>, timeout: Duration) -> Result<PgPool, CliError> {
    let options = options(url)?;
    let target = describe(&options);
    match tokio::time::timeout(timeout, PgConnection::connect_with(&options)).await {
        Ok(Ok(probe)) => {
            let _ = probe.close().await;
        }
        Ok(Err(source)) => return Err(CliError::Connect { target, source }),
        Err(_) => {
            return Err(CliError::ConnectTimeout {
                target,
                waited: HumanDuration(timeout).to_string(),
            })
        }
    }
    PgPoolOptions::new()
        .max_connections(POOL_SIZE)
        .acquire_timeout(timeout)
        .connect_with(options)
        .await
        .map_err(|source| CliError::Connect { target, source })
}

/// A pool to the database at `url` that connects when first used, for a server that must start
/// (and say what is wrong on its pages) while the database is unreachable. Statements wait at
/// most `timeout` for a connection.
pub fn connect_lazily(url: Option<&str>, timeout: Duration, size: u32) -> Result<PgPool, CliError> {
    Ok(PgPoolOptions::new()
        .max_connections(size)
        .acquire_timeout(timeout)
        .connect_lazy_with(options(url)?))
}

/// The connection options of `url`, checked.
fn options(url: Option<&str>) -> Result<PgConnectOptions, CliError> {
    let url = url
        .filter(|url| !url.is_empty())
        .ok_or(CliError::NoDatabase)?;
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(CliError::InvalidUrl(
            "expected postgres://user:password@host:port/database".to_owned(),
        ));
    }
    Ok(PgConnectOptions::from_str(url)
        .map_err(|error| CliError::InvalidUrl(error.to_string()))?
        .disable_statement_logging())
}

/// `host:port/database`, never the credentials.
fn describe(options: &PgConnectOptions) -> String {
    format!(
        "{}:{}/{}",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or(options.get_username())
    )
}
