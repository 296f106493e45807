//! # jobs: typed background jobs for Rust on PostgreSQL
//!
//! Record slow or flaky work in the same transaction as your data, return, and let a worker do
//! it: retried with exponential backoff and jitter, dead-lettered loudly when it cannot succeed,
//! never silently lost. Delivery is at least once: every job can run twice, so jobs are written
//! to be safe to repeat.
//!
//! ```ignore
//! use jobs::{job, JobContext, JobResult, State};
//!
//! #[job(max_attempts = 8, dedupe = "receipt:<order_id>")]
//! async fn send_receipt(ctx: JobContext, mailer: State<Mailer>, order_id: i64) -> JobResult {
//!     mailer.send_receipt(order_id).await?;
//!     Ok(())
//! }
//!
//! let mut tx = pool.begin().await?;
//! insert_order(&mut tx, 1042).await?;
//! send_receipt::enqueue_in(&mut tx, 1042).await?; // commits or rolls back with the order
//! tx.commit().await?;
//!
//! jobs::check_connection(&pool).await?; // "Connection refused" at once, not a pool timeout
//! jobs::migrate(&pool).await?;
//! jobs::Worker::builder(pool).state(mailer).build()?.run_until(jobs::shutdown_signal()).await?;
//! ```
//!
//! ## `#[job(...)]` keys
//!
//! | key | meaning | default |
//! |---|---|---|
//! | `name` | the stable kind string stored with each job | the function's name |
//! | `queue` | the queue jobs go to | `"default"` |
//! | `max_attempts` | attempts in all, the first included (≥ 1) | 8 |
//! | `priority` | higher runs first among ready jobs (i16) | 0 |
//! | `timeout` | longest one run may take, e.g. `"5m"`; then it counts as a transient failure | none |
//! | `lease` | how long a claim holds a job of this kind before it may be rescued | the worker's (30 s) |
//! | `heartbeat` | how often a running job's lease is renewed, shorter than `lease` | the worker's (10 s) |
//! | `backoff_base` | delay after the first failure | `"30s"` |
//! | `backoff_max` | cap on any delay | `"1h"` |
//! | `jitter` | fraction of each delay jitter may remove, 0.0 to 1.0 | 0.5 |
//! | `dedupe` | key template such as `"receipt:<order_id>"`, placeholders naming arguments | none |
//! | `dedupe_scope` | `"retained"` (while the row exists) or `"active"` (while pending) | `"retained"` |
//! | `cron` | run on a schedule: a cron expression, 5 fields or 6 with seconds first, e.g. `"0 3 * * *"`; no data arguments | none |
//! | `timezone` | IANA time zone of `cron`, e.g. `"Europe/Paris"` | `"UTC"` |
//! | `every` | run on a schedule: a fixed interval of at least `"1s"`, e.g. `"10m"`; no data arguments; not with `cron` | none |
//! | `missed` | ticks missed while no scheduler ran: `"latest"` (run once), `"all"` or `"skip"` | `"latest"` |
//! | `max_missed` | with `missed = "all"`, most missed ticks run after one gap (≥ 1) | 10 |
//! | `max_running` | most jobs of this kind running at once across all workers (≥ 1) | unlimited |
//! | `crate` | path to this crate when it is renamed and cannot be found | found from Cargo.toml |
//!
//! The macro generates, next to the function, a module of the same name with `Args` (the
//! payload), `Job` (the kind), `enqueue_in`, `enqueue`, `builder`, `enqueue_many_in` and
//! `enqueue_many`. The function itself stays callable as written, for unit tests.
//!
//! A job returning `JobResult<T>` (or `Result<T, E>`) stores `T` with the finished job: the kind's
//! `Output`, read back typed with `ctx.output_of::<charge_card::Job>(id)` (from another job,
//! through [`JobContextExt`]) or [`admin::output_of`]. See `docs/semantics.md`, "Outputs".

#![warn(missing_docs)]

pub use jobs_core::*;
pub use jobs_macros::{error_class, job};
pub use jobs_postgres::admin::RetentionConfig;
pub use jobs_postgres::worker::{
    check_connection, shutdown_signal, Completion, ConfigError, Signal, Stopped,
};
pub use jobs_postgres::{
    enqueue_job, enqueue_jobs, is_processed, mark_processed, migrate, schema_status, Batch,
    BatchError, BatchId, BatchOutcome, EnqueueBuilder, EnqueueError, Enqueued, EnqueuedBatch,
    JobContextExt, JobTransaction, MigrateError, MigrationReport, PgConnection, PgPool,
    ProcessedKey, ProcessedKeyError, SchemaStatus, TransactionError, Worker, WorkerBuilder,
    WorkerConfig, WorkerError, WorkerHandle,
};

/// Operating the queue: health numbers and alert thresholds, dead letters (list, show, replay,
/// discard) and retention; what the `jobs` command-line tool runs.
pub use jobs_postgres::admin;

/// The transactional outbox: events for other systems written in your transaction
/// ([`publish_in`](outbox::publish_in)), published to a broker by a [`Relay`](outbox::Relay)
/// (NATS JetStream with the `nats` feature: `jobs::nats`).
pub use jobs_postgres::outbox;

/// NATS JetStream for the outbox: the [`NatsPublisher`](nats::NatsPublisher) a relay publishes
/// with. With the `nats` feature.
#[cfg(feature = "nats")]
pub use jobs_nats as nats;

/// Metrics through the `metrics` facade: every name, label and outcome the worker records, in
/// one place, with [`describe`](metrics::describe) to register their units and help texts and
/// [`Gauges`](metrics::Gauges) to publish the health numbers from a process that runs no worker.
pub use jobs_postgres::metrics;

/// The PostgreSQL backend in full: SQL, store, worker internals' settings.
pub mod postgres {
    pub use jobs_postgres::*;
}

/// Support for tests: a fresh (migrated) database per test, typed checks of what a transaction
/// enqueued, and jobs run inline. See the README's "Testing your jobs".
#[cfg(feature = "testing")]
pub mod testing {
    pub use jobs_postgres::testing::*;
}

/// Items used by code that `#[job]` generates; not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use jobs_core::__private::*;
    pub use jobs_postgres::{enqueue_many, enqueue_many_in};
}
