//! A fresh database per test: see [`TestDatabase`].

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};

use super::server::{encode, server_url, ServerError};
use crate::store::databases as store;

/// Prefix of the names of test databases.
const NAME_PREFIX: &str = "jobs_test";
/// SQLSTATE `object_in_use`, e.g. "source database "template1" is being accessed by other users".
const OBJECT_IN_USE: &str = "55006";
/// How long `CREATE DATABASE` is retried while its template is in use.
const CREATE_RETRY_DEADLINE: Duration = Duration::from_secs(20);
/// Time allowed to connect to the admin database.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed to drop the database in `Drop`.
const DROP_TIMEOUT: Duration = Duration::from_secs(30);

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Errors of [`TestDatabase`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestDatabaseError {
    /// No server to create the database on.
    #[error(transparent)]
    Server(#[from] ServerError),
    /// The server URL could not be parsed.
    #[error("invalid PostgreSQL URL {url}: {source}")]
    InvalidUrl {
        /// The URL, password hidden.
        url: String,
        /// The parse error.
        #[source]
        source: sqlx::Error,
    },
    /// The admin database could not be reached.
    #[error("could not connect to PostgreSQL at {url}: {source}")]
    Connect {
        /// The URL, password hidden.
        url: String,
        /// The connection error.
        #[source]
        source: sqlx::Error,
    },
    /// `CREATE DATABASE` or `DROP DATABASE` failed.
    #[error("could not {action} database {name}: {source}")]
    Statement {
        /// `"create"` or `"drop"`.
        action: &'static str,
        /// Name of the database.
        name: String,
        /// The error of the statement.
        #[source]
        source: sqlx::Error,
    },
    /// [`TestDatabase::migrated`] could not bring the new database to the current schema.
    #[error("could not migrate database {name}: {source}")]
    Migrate {
        /// Name of the database.
        name: String,
        /// The migration's error.
        #[source]
        source: crate::migrate::MigrateError,
    },
    /// The server did not answer in time.
    #[error("timed out after {waited:?} trying to {action} database {name}")]
    Timeout {
        /// What was being done (`"connect to the admin database of"`, `"drop"`).
        action: &'static str,
        /// Name of the database.
        name: String,
        /// How long was waited.
        waited: Duration,
    },
}

/// A new, empty database with a unique name, dropped when this is dropped.
///
/// [`create`](Self::create) creates it on the server of
/// [`server_url`](super::server_url) (`DATABASE_URL` or a local server);
/// [`create_on`](Self::create_on) on a given server.
/// Names look like `jobs_test_<pid>_<counter>_<random>`, so tests can run in
/// parallel, in one or in several processes.
///
/// Dropping it runs `DROP DATABASE .. WITH (FORCE)`, which also disconnects
/// pools still open on it. `Drop` blocks until that is done (on a thread of
/// its own, so it works inside and outside a Tokio runtime of any flavour);
/// failures there are only logged. Use [`close`](Self::close) to see them.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use jobs_postgres::testing::TestDatabase;
///
/// let db = TestDatabase::create().await?;
/// let pool = db.pool(5).await?;
/// sqlx::query("CREATE TABLE t (id int)").execute(&pool).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct TestDatabase {
    name: String,
    url: String,
    options: PgConnectOptions,
    admin: PgConnectOptions,
    dropped: bool,
}

impl TestDatabase {
    /// Creates a database on the server of [`server_url`](super::server_url).
    pub async fn create() -> Result<Self, TestDatabaseError> {
        let server = server_url().await?;
        Self::create_on(&server).await
    }

    /// Creates a database on the server at `server_url`, a URL of a database
    /// there (such as `postgres`) as a user allowed to create databases.
    pub async fn create_on(server_url: &str) -> Result<Self, TestDatabaseError> {
        let admin = PgConnectOptions::from_str(server_url)
            .map_err(|source| TestDatabaseError::InvalidUrl {
                url: redact_password(server_url),
                source,
            })?
            .disable_statement_logging();
        let name = unique_name();
        let mut connection = connect(&admin, server_url, &name).await?;
        let created = create_database(&mut connection, &name).await;
        let _ = connection.close().await;
        created?;
        tracing::debug!(%name, "created test database");
        Ok(TestDatabase {
            url: with_database(server_url, &name),
            options: admin.clone().database(&name),
            admin,
            name,
            dropped: false,
        })
    }

    /// Creates a database as [`create`](Self::create) does and migrates it to the current
    /// schema ([`migrate`](crate::migrate())): the per-test database of an application's own
    /// tests, ready for enqueueing and running jobs.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// use jobs_postgres::testing::TestDatabase;
    ///
    /// let db = TestDatabase::migrated().await?;
    /// let pool = db.pool(5).await?;
    /// let ready: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs_queue")
    ///     .fetch_one(&pool)
    ///     .await?;
    /// assert_eq!(ready, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn migrated() -> Result<Self, TestDatabaseError> {
        let server = server_url().await?;
        Self::migrated_on(&server).await
    }

    /// Creates a database on the server at `server_url`, as [`create_on`](Self::create_on)
    /// does, and migrates it to the current schema, as [`migrated`](Self::migrated) does.
    pub async fn migrated_on(server_url: &str) -> Result<Self, TestDatabaseError> {
        let database = Self::create_on(server_url).await?;
        database.migrate().await?;
        Ok(database)
    }

    /// Runs the migrations on this database, through a pool of its own that is closed after.
    async fn migrate(&self) -> Result<(), TestDatabaseError> {
        let pool = self
            .pool(1)
            .await
            .map_err(|source| TestDatabaseError::Connect {
                url: redact_password(&self.url),
                source,
            })?;
        let migrated = crate::migrate(&pool).await;
        pool.close().await;
        migrated
            .map(drop)
            .map_err(|source| TestDatabaseError::Migrate {
                name: self.name.clone(),
                source,
            })
    }

    /// URL of the database (the server URL with the database name swapped).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Name of the database.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Options to connect to the database; prefer these to parsing [`url`](Self::url).
    pub fn connect_options(&self) -> PgConnectOptions {
        self.options.clone()
    }

    /// A new pool of at most `max_connections` connections to the database.
    pub async fn pool(&self, max_connections: u32) -> Result<PgPool, sqlx::Error> {
        PgPoolOptions::new()
            .max_connections(max_connections)
            .connect_with(self.connect_options())
            .await
    }

    /// A new single connection to the database.
    pub async fn connect(&self) -> Result<PgConnection, sqlx::Error> {
        PgConnection::connect_with(&self.options).await
    }

    /// Drops the database now, reporting failures (which `Drop` only logs).
    pub async fn close(mut self) -> Result<(), TestDatabaseError> {
        self.dropped = true;
        drop_database(&self.admin, &self.name).await
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        let admin = self.admin.clone();
        let name = self.name.clone();
        // A thread of its own with its own runtime: blocking on the drop
        // works whether or not the caller is inside a runtime, of any flavour.
        let spawned = std::thread::Builder::new()
            .name("jobs-test-db-drop".to_owned())
            .spawn(move || -> Result<(), String> {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("could not build a runtime: {e}"))?;
                runtime
                    .block_on(async {
                        tokio::time::timeout(DROP_TIMEOUT, drop_database(&admin, &name)).await
                    })
                    .map_err(|_| format!("timed out after {DROP_TIMEOUT:?}"))?
                    .map_err(|e| e.to_string())
            });
        let outcome = match spawned {
            Ok(thread) => thread
                .join()
                .unwrap_or_else(|_| Err("the dropping thread panicked".to_owned())),
            Err(e) => Err(format!("could not spawn a thread: {e}")),
        };
        match outcome {
            Ok(()) => tracing::debug!(name = %self.name, "dropped test database"),
            Err(error) => {
                tracing::warn!(name = %self.name, %error, "could not drop test database")
            }
        }
    }
}

/// Returns `url` with its database (the path) replaced by `database`.
///
/// Keeps the scheme, user, password, host, port and query parameters (such
/// as `?host=/var/run/postgresql`), except a `dbname` parameter, which would
/// override the path. Works on `postgres://` and `postgresql://` URLs, with or
/// without a database; the database name is percent-encoded as needed.
///
/// ```
/// use jobs_postgres::testing::with_database;
///
/// assert_eq!(
///     with_database("postgres://me@localhost:5432/postgres?host=/run/postgresql", "t1"),
///     "postgres://me@localhost:5432/t1?host=/run/postgresql",
/// );
/// assert_eq!(with_database("postgres://me@db", "t1"), "postgres://me@db/t1");
/// ```
pub fn with_database(url: &str, database: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(index) => url.split_at(index + 3),
        None => ("", url),
    };
    let (rest, fragment) = match rest.find('#') {
        Some(index) => rest.split_at(index),
        None => (rest, ""),
    };
    let (rest, query) = match rest.find('?') {
        Some(index) => (&rest[..index], &rest[index + 1..]),
        None => (rest, ""),
    };
    let authority = rest.find('/').map_or(rest, |index| &rest[..index]);
    let params: Vec<&str> = query
        .split('&')
        .filter(|param| !param.is_empty() && !param.starts_with("dbname="))
        .collect();
    let mut result = format!("{scheme}{authority}/{}", encode(database));
    if !params.is_empty() {
        result.push('?');
        result.push_str(&params.join("&"));
    }
    result.push_str(fragment);
    result
}

/// `url` with the password, if any, replaced by `***` (for error messages).
fn redact_password(url: &str) -> String {
    let Some(start) = url.find("://").map(|index| index + 3) else {
        return url.to_owned();
    };
    let authority_end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |index| start + index);
    let authority = &url[start..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let Some(colon) = authority[..at].find(':') else {
        return url.to_owned();
    };
    format!(
        "{}{}:***{}",
        &url[..start],
        &authority[..colon],
        &url[start + at..]
    )
}

/// `jobs_test_<pid>_<counter>_<random>`.
fn unique_name() -> String {
    let counter = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u64(counter);
    if let Ok(since_epoch) = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH) {
        hasher.write_u128(since_epoch.as_nanos());
    }
    let random = hasher.finish() & 0xffff_ffff;
    format!(
        "{NAME_PREFIX}_{}_{counter}_{random:08x}",
        std::process::id()
    )
}

/// A connection to the admin database, within [`CONNECT_TIMEOUT`]; `url` names the server in
/// errors (its password hidden).
async fn connect(
    admin: &PgConnectOptions,
    url: &str,
    name: &str,
) -> Result<PgConnection, TestDatabaseError> {
    match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(admin)).await {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(source)) => Err(TestDatabaseError::Connect {
            url: redact_password(url),
            source,
        }),
        Err(_) => Err(TestDatabaseError::Timeout {
            action: "connect to the admin database of",
            name: name.to_owned(),
            waited: CONNECT_TIMEOUT,
        }),
    }
}

/// `CREATE DATABASE`, retried with backoff while the template database is in
/// use by another session (PostgreSQL refuses to copy it then).
async fn create_database(
    connection: &mut PgConnection,
    name: &str,
) -> Result<(), TestDatabaseError> {
    let started = Instant::now();
    let mut backoff = Duration::from_millis(20);
    loop {
        match store::create_database(&mut *connection, name).await {
            Ok(_) => return Ok(()),
            Err(sqlx::Error::Database(error))
                if error.code().as_deref() == Some(OBJECT_IN_USE)
                    && started.elapsed() + backoff < CREATE_RETRY_DEADLINE =>
            {
                tracing::debug!(%name, %error, ?backoff, "template database busy, retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
            Err(source) => {
                return Err(TestDatabaseError::Statement {
                    action: "create",
                    name: name.to_owned(),
                    source,
                })
            }
        }
    }
}

/// `DROP DATABASE .. WITH (FORCE)` on a connection of its own to the admin database.
async fn drop_database(admin: &PgConnectOptions, name: &str) -> Result<(), TestDatabaseError> {
    let server = format!("{}:{}", admin.get_host(), admin.get_port());
    let mut connection = connect(admin, &server, name).await?;
    let dropped = store::drop_database(&mut connection, name).await;
    let _ = connection.close().await;
    dropped
        .map(|_| ())
        .map_err(|source| TestDatabaseError::Statement {
            action: "drop",
            name: name.to_owned(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swaps_the_database() {
        assert_eq!(
            with_database("postgres://u@127.0.0.1:5432/postgres", "x"),
            "postgres://u@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_database("postgresql://u:p@h/postgres?sslmode=disable", "x"),
            "postgresql://u:p@h/x?sslmode=disable"
        );
        assert_eq!(
            with_database(
                "postgres://u@localhost/db?host=/var/run/postgresql&dbname=db",
                "x"
            ),
            "postgres://u@localhost/x?host=/var/run/postgresql"
        );
        assert_eq!(
            with_database("postgres://h:5433", "x"),
            "postgres://h:5433/x"
        );
        assert_eq!(
            with_database("postgres://h?port=1", "a b"),
            "postgres://h/a%20b?port=1"
        );
        assert_eq!(
            with_database("postgres://%2Fvar%2Frun%2Fpostgresql/db", "x"),
            "postgres://%2Fvar%2Frun%2Fpostgresql/x"
        );
    }

    #[test]
    fn swapped_urls_parse_to_the_same_options() {
        let url = with_database("postgres://u@localhost:5433/postgres?host=/tmp/sock", "x");
        let options = PgConnectOptions::from_str(&url).expect("valid URL");
        assert_eq!(options.get_database(), Some("x"));
        assert_eq!(options.get_port(), 5433);
        assert_eq!(options.get_username(), "u");
        assert_eq!(
            options
                .get_socket()
                .map(|p| p.to_string_lossy().into_owned()),
            Some("/tmp/sock".to_owned())
        );
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact_password("postgres://u:secret@h:1/db?x=1"),
            "postgres://u:***@h:1/db?x=1"
        );
        assert_eq!(redact_password("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_password("postgres://h/db"), "postgres://h/db");
    }

    #[test]
    fn names_are_unique_and_valid() {
        let a = unique_name();
        let b = unique_name();
        assert_ne!(a, b);
        assert!(a.len() < 63, "{a}");
        assert!(a.starts_with("jobs_test_"));
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_'));
    }
}
