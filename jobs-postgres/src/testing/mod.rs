//! Test support: PostgreSQL servers and databases for tests and examples.
//!
//! Enabled by the `testing` feature. Databases first, then helpers for testing jobs.
//!
//! - [`server_url`] finds a PostgreSQL server to create databases on:
//!   `DATABASE_URL` if set, else a local server on 127.0.0.1:5432 or the
//!   usual unix socket directories, else a throwaway cluster started once per
//!   process (when PostgreSQL's server binaries are installed). Without any of
//!   these it fails with [`ServerError::NoPostgres`], which says what to do.
//! - [`TestDatabase`] is a fresh database with a unique name on that server,
//!   dropped (with `WITH (FORCE)`) when it is dropped: one per test, so tests
//!   run in parallel without seeing each other's data.
//! - [`ThrowawayCluster`] is a private PostgreSQL cluster in a temporary
//!   directory on a free port, which can be stopped and started again on the
//!   same port: for tests of how the system behaves while the database is
//!   down. Create databases on it with [`TestDatabase::create_on`].
//!
//! For the tests of an application's jobs:
//!
//! - [`TestDatabase::migrated`] is a fresh database with the jobs schema.
//! - [`enqueued`], [`assert_enqueued`], [`assert_none_enqueued`] and
//!   [`assert_nothing_enqueued`] check, typed, what a transaction enqueued,
//!   looking inside it before it commits.
//! - [`run_job`] runs one job inline, without a worker or a database, and
//!   answers with the [`Decision`](jobs_core::Decision) a worker would write.
//! - [`drain`] runs every due job of given kinds now, and the jobs they
//!   enqueue, through the worker's own claim, run and outcome code.
//!
//! Servers started here never outlive the test process: a watchdog process
//! stops them and removes their files when the process exits, even when it
//! is killed.
//!
//! ```no_run
//! use jobs_postgres::testing::{TestDatabase, ThrowawayCluster};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! // A database on the shared server.
//! let db = TestDatabase::create().await?;
//! let pool = db.pool(4).await?;
//!
//! // An outage: a private cluster, down for a while.
//! let cluster = ThrowawayCluster::start().await?;
//! let chaos_db = TestDatabase::create_on(&cluster.url()).await?;
//! let chaos_pool = chaos_db.pool(4).await?;
//! cluster.stop().await?;
//! // ... the server is unreachable here ...
//! cluster.start_again().await?;
//! # drop((pool, chaos_pool));
//! # Ok(())
//! # }
//! ```

mod cluster;
mod database;
mod drain;
mod enqueued;
mod run;
mod server;

pub use cluster::{ClusterError, ThrowawayCluster};
pub use database::{with_database, TestDatabase, TestDatabaseError};
pub use drain::{drain, Drain, DrainError, DrainedRun, DEFAULT_MAX_RUNS};
pub use enqueued::{
    assert_enqueued, assert_none_enqueued, assert_nothing_enqueued, enqueued, EnqueuedError,
};
pub use run::{run_job, RunJob, RunJobError};
pub use server::{server_url, throwaway_server_url, ServerError, DATABASE_URL_VAR};
