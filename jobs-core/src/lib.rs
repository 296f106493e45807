//! The database-free core of `jobs`: job kinds and their options, the context a job runs with,
//! typed outcomes and their classification, the retry policy as a pure function, the registry of
//! kinds gathered through `inventory`, and payload encoding.
//!
//! Applications use it through the `jobs` crate, which re-exports everything here next to the
//! `#[job]` attribute and the PostgreSQL backend.

#![warn(missing_docs)]

pub mod context;
pub mod dedupe;
pub mod dependency;
pub mod duration;
pub mod error;
pub mod future;
pub mod kind;
mod macro_support;
pub mod name;
pub mod new_job;
pub mod outcome;
pub mod output;
pub mod payload;
pub mod rate_limit;
pub mod registry;
pub mod retry;
pub mod schedule;
pub mod state;

pub use context::{JobContext, JobId, LeaseControl, LeaseError};
pub use dedupe::DedupeScope;
pub use dependency::{Dependency, IntoDependency, OnFailure, Prerequisites};
pub use duration::{format_duration, parse_duration, DurationError};
pub use error::{
    error_chain, BoxError, ClassifyError, Disposition, ErrorClass, ErrorClassifier, JobError,
    JobResult,
};
pub use future::BoxFuture;
pub use kind::{Handler, HandlerFuture, InvocationError, JobKind, JobOptions, JobRegistration};
pub use name::{check_kind_name, check_queue_name, NameError, NameOf, MAX_NAME_LEN};
pub use new_job::{EncodeError, NewJob, RunAt, MAX_KEY_BYTES};
pub use outcome::{decide, AttemptError, Decision, RunOutcome};
pub use output::{
    decode_output, encode_output, EncodedOutput, JobOutput, OutputEncodeError, MAX_OUTPUT_BYTES,
};
pub use payload::MAX_PAYLOAD_DEPTH;
pub use rate_limit::{RateLimit, RateLimitError};
pub use registry::{Registry, RegistryError};
pub use retry::{MaxAttemptsError, RetryPolicy};
pub use schedule::{
    check_cron, Cadence, MissedTicks, Schedule, ScheduleError, ScheduleOptions, TickPlan,
};
pub use state::{State, StateMap, StateRequirement};

/// Items used by code that `#[job]` generates; not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::kind::{decode_args, require_state};
    pub use crate::macro_support::*;
    pub use inventory;
    pub use serde;
    pub use serde_json;
}
