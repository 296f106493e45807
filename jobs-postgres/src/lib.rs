//! The PostgreSQL backend of `jobs`: embedded migrations, enqueue in the caller's transaction,
//! and a `FOR UPDATE SKIP LOCKED` worker with leases, heartbeats, rescue and graceful shutdown.
//!
//! Applications use it through the `jobs` crate. All SQL lives in [`sql`]; [`store`] is the
//! worker's only way to the database; [`admin`] is the operator's (health numbers, dead letters,
//! retention), which the `jobs` command-line tool wraps; [`metrics`] names every metric the
//! worker records; [`outbox`] writes events for other systems in the caller's transaction and
//! relays them to a broker.

#![warn(missing_docs)]

pub mod admin;
pub mod enqueue;
pub mod metrics;
pub mod migrate;
pub mod outbox;
pub mod processed;
pub mod sql;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
pub mod transaction;
pub mod worker;

pub use enqueue::{
    enqueue_job, enqueue_jobs, enqueue_many, enqueue_many_in, EnqueueBuilder, EnqueueError,
    Enqueued,
};
pub use migrate::{migrate, MigrateError, MigrationReport};
pub use processed::{is_processed, mark_processed, ProcessedKey, ProcessedKeyError};
pub use sqlx::{PgConnection, PgPool};
pub use transaction::{JobContextExt, JobTransaction, TransactionError};
pub use worker::{Signal, Stopped, Worker, WorkerBuilder, WorkerConfig, WorkerError, WorkerHandle};
