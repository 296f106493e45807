//! Job kinds: the stable name, the payload type and the options of one kind of job.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::context::JobContext;
use crate::dedupe::DedupeScope;
use crate::error::JobResult;
use crate::future::BoxFuture;
use crate::output::{EncodedOutput, JobOutput};
use crate::rate_limit::RateLimit;
use crate::retry::RetryPolicy;
use crate::schedule::ScheduleOptions;
use crate::state::{StateMap, StateRequirement};

/// One kind of job. `#[job]` implements it for a marker type next to the function.
pub trait JobKind: Send + Sync + 'static {
    /// The stable name stored with each job; renaming the function must not change it.
    const NAME: &'static str;
    /// The job's data arguments, as stored (JSON) in the job row.
    type Args: Serialize + DeserializeOwned + Send + 'static;
    /// What the job returns when it succeeds (`T` of `JobResult<T>`), stored as JSON with the
    /// finished job and read back typed; `()` for jobs returning nothing, stored as NULL. Any
    /// `Serialize + DeserializeOwned + Send + 'static` type ([`JobOutput`] is implemented for
    /// every one).
    type Output: JobOutput;
    /// The kind's defaults: queue, priority, retry policy, timeout, dedupe.
    const OPTIONS: JobOptions;
}

/// Per-kind settings, fixed by `#[job(...)]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobOptions {
    /// The queue jobs of this kind go to by default.
    pub queue: &'static str,
    /// Higher runs first among ready jobs of a queue.
    pub priority: i16,
    /// Attempts and backoff.
    pub retry: RetryPolicy,
    /// Longest a single run may take before it is abandoned as a transient failure.
    pub timeout: Option<Duration>,
    /// How long a claim holds a job of this kind before it may be rescued; the worker's
    /// setting when `None`.
    pub lease: Option<Duration>,
    /// How often the lease of a running job of this kind is renewed; the worker's setting when
    /// `None`. A worker beats at the shortest interval among its kinds.
    pub heartbeat: Option<Duration>,
    /// The dedupe key template, such as `"receipt:<order_id>"`.
    pub dedupe: Option<&'static str>,
    /// How long a dedupe key holds.
    pub dedupe_scope: DedupeScope,
    /// When the kind runs on its own, for kinds without data arguments.
    pub schedule: Option<ScheduleOptions>,
    /// Most jobs of this kind running at once across all workers; unlimited when `None`.
    pub max_running: Option<u32>,
    /// Most jobs of this kind started in any window of the limit's length, across all workers;
    /// unlimited when `None`.
    pub rate_limit: Option<RateLimit>,
    /// The fairness key template, such as `"<tenant_id>"`: ready jobs of this kind are claimed
    /// round-robin across the keys it renders rather than oldest first, so that a flood under
    /// one key delays the jobs of the others by about one round; `None` for oldest first.
    pub fair_key: Option<&'static str>,
    /// The limit key template, such as `"<merchant_id>"`: the per-key limits below count the
    /// jobs whose payloads render the same key; `None` when the kind has no per-key limit.
    pub limit_key: Option<&'static str>,
    /// Most jobs of this kind with the same limit key running at once, across all workers;
    /// unlimited when `None`. Needs [`limit_key`](Self::limit_key).
    pub max_running_per_key: Option<u32>,
    /// Most jobs of this kind with the same limit key started in any window of the limit's
    /// length, across all workers; unlimited when `None`. Needs [`limit_key`](Self::limit_key).
    pub rate_limit_per_key: Option<RateLimit>,
}

impl JobOptions {
    /// The queue used when a kind names none.
    pub const DEFAULT_QUEUE: &'static str = "default";

    /// The defaults: queue `"default"`, priority 0, the default retry policy, no timeout, no
    /// dedupe, no schedule, no limit on running jobs or on their rate, no fairness key, no
    /// per-key limit.
    pub const DEFAULT: JobOptions = JobOptions {
        queue: Self::DEFAULT_QUEUE,
        priority: 0,
        retry: RetryPolicy::DEFAULT,
        timeout: None,
        lease: None,
        heartbeat: None,
        dedupe: None,
        dedupe_scope: DedupeScope::Retained,
        schedule: None,
        max_running: None,
        rate_limit: None,
        fair_key: None,
        limit_key: None,
        max_running_per_key: None,
        rate_limit_per_key: None,
    };
}

impl Default for JobOptions {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Why a stored job could not be turned into a handler call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvocationError {
    /// The payload does not decode into the kind's arguments.
    #[error("payload of job kind `{kind}` does not decode: {message}")]
    Undecodable {
        /// The job kind.
        kind: &'static str,
        /// The decoder's message.
        message: String,
    },
    /// The worker lacks a state value the handler needs.
    #[error("job kind `{kind}` needs state of type `{type_name}`, which the worker was not given")]
    MissingState {
        /// The job kind.
        kind: &'static str,
        /// The missing type.
        type_name: &'static str,
    },
}

/// A running handler: it yields the job's output encoded as JSON (`None` for `()` and other
/// outputs encoding as `null`), or the error the run ended with.
pub type HandlerFuture = BoxFuture<'static, JobResult<Option<EncodedOutput>>>;

/// Decodes a stored payload and starts the handler.
pub type Handler = fn(JobContext, &str, &StateMap) -> Result<HandlerFuture, InvocationError>;

/// A job kind as registered through `inventory` by `#[job]`.
#[derive(Debug, Clone, Copy)]
pub struct JobRegistration {
    /// The stable kind name.
    pub name: &'static str,
    /// The path of the function that defines it, for messages.
    pub function: &'static str,
    /// The kind's options.
    pub options: JobOptions,
    /// State types the handler needs.
    pub required_state: &'static [StateRequirement],
    /// Whether the kind has data arguments (a schedule can only enqueue kinds without).
    pub takes_arguments: bool,
    /// Decodes the payload and starts the handler.
    pub handler: Handler,
}

inventory::collect!(JobRegistration);

/// Decodes a payload into a kind's arguments; used by generated handlers.
pub fn decode_args<K: JobKind>(payload: &str) -> Result<K::Args, InvocationError> {
    serde_json::from_str(payload).map_err(|error| InvocationError::Undecodable {
        kind: K::NAME,
        message: error.to_string(),
    })
}

/// Fetches a state value for a handler; used by generated handlers.
pub fn require_state<T: Send + Sync + 'static>(
    kind: &'static str,
    states: &StateMap,
) -> Result<crate::state::State<T>, InvocationError> {
    states.get::<T>().ok_or(InvocationError::MissingState {
        kind,
        type_name: std::any::type_name::<T>(),
    })
}
