//! Finding a PostgreSQL server to run tests against: see [`server_url`].

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};
use tokio::sync::OnceCell;
use tokio::task::JoinSet;

use crate::store::databases as store;

/// Environment variable naming the server to use, as a URL of an admin database.
pub const DATABASE_URL_VAR: &str = "DATABASE_URL";

/// Default PostgreSQL port, probed on 127.0.0.1 and in the usual socket directories.
const DEFAULT_PORT: u16 = 5432;
/// Unix socket directories probed for a local server.
const SOCKET_DIRS: [&str; 3] = ["/var/run/postgresql", "/run/postgresql", "/tmp"];
/// Time allowed to the probe of local servers as a whole.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The URL [`server_url`] settled on (the first local server that answered).
static RESOLVED: OnceCell<String> = OnceCell::const_new();

/// Errors of [`server_url`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// No server was found.
    #[error(
        "no PostgreSQL server to test against: DATABASE_URL is not set and no server accepted a \
         connection on 127.0.0.1:5432 or /var/run/postgresql; start PostgreSQL (installed with \
         e.g. `apt-get install postgresql`) or set DATABASE_URL=postgres://user@host:port/db"
    )]
    NoPostgres,
}

/// URL of a PostgreSQL server to create test databases on; its database is
/// an admin database such as `postgres`, and its user may create databases.
///
/// In order:
/// 1. `DATABASE_URL`, if set, as is (an unreachable server surfaces later,
///    as a connection error).
/// 2. A local server: 127.0.0.1:5432 (TCP first, as its URL is the simplest),
///    then the unix sockets in `/var/run/postgresql`, `/run/postgresql` and
///    `/tmp`, as `$PGUSER`, `$USER`, `$LOGNAME`, `postgres` or `root`,
///    database `postgres`; the first (in that order) that accepts a
///    connection within 2 s and whose user may create databases.
///
/// Without either, [`ServerError::NoPostgres`], which says what to start or set. The result of
/// step 2 is cached for the life of the process.
pub async fn server_url() -> Result<String, ServerError> {
    if let Some(url) = database_url_from_env() {
        return Ok(url);
    }
    RESOLVED
        .get_or_try_init(|| async {
            match probe_local_servers().await {
                Some(url) => {
                    tracing::debug!(%url, "using the local PostgreSQL server");
                    Ok(url)
                }
                None => Err(ServerError::NoPostgres),
            }
        })
        .await
        .cloned()
}

fn database_url_from_env() -> Option<String> {
    std::env::var(DATABASE_URL_VAR)
        .ok()
        .filter(|url| !url.trim().is_empty())
}

/// Candidate URLs of a local server, most preferred first.
fn local_candidates() -> Vec<String> {
    let mut users: Vec<String> = Vec::new();
    for user in ["PGUSER", "USER", "LOGNAME"]
        .iter()
        .filter_map(|var| std::env::var(var).ok())
        .chain(["postgres".to_owned(), "root".to_owned()])
    {
        if !user.is_empty() && !users.contains(&user) {
            users.push(user);
        }
    }
    let mut candidates = Vec::new();
    for user in &users {
        candidates.push(format!(
            "postgres://{}@127.0.0.1:{DEFAULT_PORT}/postgres",
            encode(user)
        ));
    }
    for dir in SOCKET_DIRS {
        let socket = std::path::Path::new(dir).join(format!(".s.PGSQL.{DEFAULT_PORT}"));
        if !socket.exists() {
            continue;
        }
        for user in &users {
            candidates.push(format!(
                "postgres://{}@localhost:{DEFAULT_PORT}/postgres?host={dir}",
                encode(user)
            ));
        }
    }
    candidates
}

/// The first usable local server, probing all candidates concurrently.
async fn probe_local_servers() -> Option<String> {
    let candidates = local_candidates();
    let mut outcomes: Vec<Option<bool>> = vec![None; candidates.len()];
    let mut probes = JoinSet::new();
    for (index, url) in candidates.iter().cloned().enumerate() {
        probes.spawn(async move { (index, is_usable(&url).await) });
    }
    let probing = async {
        while let Some(joined) = probes.join_next().await {
            let (index, usable) = joined.unwrap_or((usize::MAX, false));
            if let Some(outcome) = outcomes.get_mut(index) {
                *outcome = Some(usable);
            }
            // Done once the best remaining candidate is known to be usable.
            match outcomes.iter().position(|outcome| *outcome != Some(false)) {
                Some(best) if outcomes[best] == Some(true) => return Some(best),
                Some(_) => {}
                None => return None,
            }
        }
        None
    };
    let best = tokio::time::timeout(PROBE_TIMEOUT, probing)
        .await
        .ok()
        .flatten()?;
    candidates.into_iter().nth(best)
}

/// Whether the server at `url` accepts a connection and lets its user create
/// databases (and is recent enough for `DROP DATABASE .. WITH (FORCE)`).
async fn is_usable(url: &str) -> bool {
    let Ok(options) = PgConnectOptions::from_str(url) else {
        return false;
    };
    let options = options.disable_statement_logging();
    let Ok(mut connection) = PgConnection::connect_with(&options).await else {
        return false;
    };
    let usable = store::can_create_databases(&mut connection).await;
    let _ = connection.close().await;
    matches!(usable, Ok(true))
}

/// Percent-encodes everything but unreserved URL characters.
pub(crate) fn encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_user_names() {
        assert_eq!(encode("root"), "root");
        assert_eq!(encode("a b@c"), "a%20b%40c");
    }

    #[test]
    fn candidates_prefer_tcp() {
        let candidates = local_candidates();
        assert!(candidates[0].starts_with("postgres://"));
        assert!(candidates[0].contains("@127.0.0.1:5432/postgres"));
        assert!(candidates
            .iter()
            .any(|c| c.starts_with("postgres://postgres@")));
    }

    #[test]
    fn no_postgres_says_what_to_do() {
        let message = ServerError::NoPostgres.to_string();
        assert!(message.contains("apt-get install postgresql"));
        assert!(message.contains("DATABASE_URL=postgres://user@host:port/db"));
    }
}
