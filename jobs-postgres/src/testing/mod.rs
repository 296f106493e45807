//! Test support: PostgreSQL servers and databases for tests and examples.
//!
//! Enabled by the `testing` feature. Databases first, then helpers for testing jobs.
//!
//! - [`server_url`] finds a PostgreSQL server to create databases on:
//!   `DATABASE_URL` if set, else a local server on 127.0.0.1:5432 or the
//!   usual unix socket directories. Without either it fails with
//!   [`ServerError::NoPostgres`], which says what to do.
//! - [`TestDatabase`] is a fresh database with a unique name on that server,
//!   dropped (with `WITH (FORCE)`) when it is dropped: one per test, so tests
//!   run in parallel without seeing each other's data.
//!   [`TestDatabase::create_on`] creates one on a server of your choosing.
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
//! ```no_run
//! use jobs_postgres::testing::TestDatabase;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! // A database with the jobs schema, on the server `server_url` finds; dropped with `db`.
//! let db = TestDatabase::migrated().await?;
//! let pool = db.pool(4).await?;
//! # drop(pool);
//! # Ok(())
//! # }
//! ```

mod database;
mod drain;
mod enqueued;
mod run;
mod server;

pub use database::{with_database, TestDatabase, TestDatabaseError};
pub use drain::{drain, Drain, DrainError, DrainedRun, DEFAULT_MAX_RUNS};
pub use enqueued::{
    assert_enqueued, assert_none_enqueued, assert_nothing_enqueued, enqueued, EnqueuedError,
};
pub use run::{run_job, RunJob, RunJobError};
pub use server::{server_url, ServerError, DATABASE_URL_VAR};
