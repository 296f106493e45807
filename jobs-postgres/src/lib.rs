//! The PostgreSQL backend of `jobs`: embedded migrations, enqueue in the caller's transaction,
//! and a `FOR UPDATE SKIP LOCKED` worker with leases, heartbeats, rescue and graceful shutdown.
//!
//! Applications use it through the `jobs` crate. Every statement lives in the crate's private
//! store, beside the function that binds it, and nothing else runs SQL; [`admin`] is the
//! operator's way in (health numbers, dead letters, retention), which the `jobs` command-line
//! tool wraps; [`metrics`] names every metric the worker records; [`outbox`] writes events for
//! other systems in the caller's transaction and relays them to a broker.

#![warn(missing_docs)]

pub mod admin;
mod backoff;
pub mod batch;
mod bulk_copy;
mod config_error;
pub mod enqueue;
pub mod metrics;
pub mod migrate;
pub mod outbox;
pub mod output;
mod periodic;
pub mod processed;
mod store;
#[cfg(feature = "testing")]
pub mod testing;
pub mod transaction;
pub mod worker;

pub use batch::{Batch, BatchError, BatchId, BatchOutcome, EnqueuedBatch};
pub use config_error::ConfigError;
pub use enqueue::{
    enqueue_job, enqueue_jobs, enqueue_many, enqueue_many_in, EnqueueBuilder, EnqueueError,
    Enqueued,
};
pub use migrate::{migrate, schema_status, MigrateError, MigrationReport, SchemaStatus};
pub use output::{output_of, OutputError};
pub use processed::{is_processed, mark_processed, ProcessedKey, ProcessedKeyError};
pub use sqlx::{PgConnection, PgPool};
pub use transaction::{JobContextExt, JobTransaction, TransactionError};
pub use worker::{Signal, Stopped, Worker, WorkerBuilder, WorkerConfig, WorkerError, WorkerHandle};

/// The raw statements and claim primitives, for this workspace's own plan tests and benchmarks.
/// Not part of the API: anything here may change in any release.
#[doc(hidden)]
pub mod __private {
    /// Statements, as the store runs them.
    pub mod sql {
        pub use crate::store::batches::{
            ADD_TO_CHUNKS, BATCH_COUNTS, CREATE_BATCH, FAILED_MEMBERS, LOCK_RUNNING_MEMBER,
            OPEN_BATCH,
        };
        pub use crate::store::cancel::{
            CANCEL_BY_DEDUPE_KEY, CANCEL_JOBS, CANCEL_MATCHING, COUNT_MATCHING,
        };
        pub use crate::store::claims::{
            CLAIM_FAIR_JOBS, CLAIM_FAIR_JOBS_AFTER, CLAIM_JOBS, CLAIM_JOBS_AFTER,
            CLAIM_KEY_LIMITED_JOBS, CLAIM_KEY_TURNS, CLAIM_KEY_TURNS_AFTER,
            CLAIM_KEY_TURNS_TO_LIMIT, CLAIM_KEY_TURNS_TO_LIMIT_AFTER, CLAIM_LIMITED_JOBS,
            CLAIM_ONE_KIND, CLAIM_ONE_KIND_AFTER, CLAIM_UNKEYED_LIMITED_JOBS, DUE_JOBS_REMAIN,
            KEYED_JOBS_DUE, LOCK_LIMITED_KIND, RATE_LIMIT_ROOM_IN,
        };
        pub use crate::store::copy::{COPY_JOBS, RESERVE_JOB_IDS};
        pub use crate::store::dead::{
            COUNT_DEAD, DISCARD_DEAD, JOB_DETAILS, LIST_DEAD, PREVIEW_DISCARD_DEAD,
            PREVIEW_REPLAY_DEAD, REPLAY_DEAD,
        };
        pub use crate::store::dependencies::{
            EXISTING_JOBS, INSERT_DEPENDENT_JOB, LOCK_PREREQUISITES,
        };
        pub use crate::store::enqueue::FIND_DEDUPE_HOLDERS;
        pub use crate::store::find::{
            FIND_BY_DEDUPE_KEY, FIND_BY_ID, FIND_LIVE, FIND_OF_KIND, FIND_RECENT,
        };
        pub use crate::store::outbox::{
            CLAIM_OUTBOX, LIST_PARKED, PREVIEW_REPLAY_PARKED, REPLAY_PARKED,
        };
        pub use crate::store::outcomes::{COMPLETE_IN_TRANSACTION, HEARTBEAT, RECORD_OUTCOMES};
        pub use crate::store::outputs::READ_OUTPUT;
        pub use crate::store::processed::{IS_PROCESSED, MARK_PROCESSED};
        pub use crate::store::rescue::{LIST_EXPIRED, RESCUE_EXPIRED, RESCUE_JOBS};
        pub use crate::store::retention::{
            COUNT_PRUNABLE, LOCK_PRUNABLE, PRUNE_BATCHES, PRUNE_FINISHED, PRUNE_PROCESSED_KEYS,
            RETENTION_LOCK_KEY,
        };
        pub use crate::store::stats::{
            EXACT_RETAINED_BOUND, KEY_LIMIT_USE, QUEUE_STATS, RETAINED_COUNTS,
        };
        pub use crate::store::throughput::{ADD_THROUGHPUT, PRUNE_THROUGHPUT, THROUGHPUT};
        pub use crate::store::transactions::{BEGIN_READ_COMMITTED, DEFAULT_ISOLATION};
        pub use crate::store::watch::{UNWATCH_QUEUE, WATCH_QUEUE};
        pub use crate::store::workers::{FORGET_WORKER, LIVE_WORKERS, RECORD_PRESENCE};
        pub use crate::store::workflows::{LONGEST_OPEN_BATCHES, LONGEST_WAITING, WORKFLOW_JOBS};
        pub use crate::store::NOTIFY_CHANNEL;
    }

    pub use crate::bulk_copy::COPY_MIN_JOBS;

    /// The claim and outcome primitives the worker runs.
    pub mod store {
        pub use crate::store::claims::{
            claim, claim_ahead, claim_fair, claim_key_limited, claim_limited, ClaimCount,
            ClaimLimits, ClaimPlace, ClaimedJob, FairPlace, KeyRound, LimitedClaim,
        };
        pub use crate::store::outcomes::{record_outcomes, Fenced, Outcome};
    }
}
