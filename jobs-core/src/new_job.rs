//! A job about to be enqueued: encoded payload plus per-call options.

use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::dedupe::{render_key, DedupeScope};
use crate::kind::JobKind;

/// Why a job could not be prepared for enqueueing.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// The arguments do not serialize to JSON.
    #[error("arguments of job kind `{kind}` do not serialize: {source}")]
    Payload {
        /// The job kind.
        kind: &'static str,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
    /// The arguments serialized to something other than a JSON object.
    #[error("arguments of job kind `{kind}` must serialize to a JSON object")]
    NotAnObject {
        /// The job kind.
        kind: &'static str,
    },
}

/// When a job becomes ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RunAt {
    /// As soon as it commits.
    #[default]
    Now,
    /// This long after enqueue (measured by the database clock).
    After(Duration),
    /// At this time.
    At(SystemTime),
}

/// A job ready to be written: kind, queue, payload and options.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    /// The kind's stable name.
    pub kind: &'static str,
    /// The queue it goes to.
    pub queue: String,
    /// The encoded arguments (a JSON object).
    pub payload: Value,
    /// Higher runs first.
    pub priority: i16,
    /// Attempts allowed in all.
    pub max_attempts: u32,
    /// When it becomes ready.
    pub run_at: RunAt,
    /// The rendered dedupe key, when the kind declares a template.
    pub dedupe_key: Option<String>,
    /// How long the dedupe key holds.
    pub dedupe_scope: DedupeScope,
}

impl NewJob {
    /// Encodes `args` of kind `K` with the kind's default options.
    pub fn of<K: JobKind>(args: &K::Args) -> Result<Self, EncodeError> {
        let payload = serde_json::to_value(args).map_err(|source| EncodeError::Payload {
            kind: K::NAME,
            source,
        })?;
        if !payload.is_object() {
            return Err(EncodeError::NotAnObject { kind: K::NAME });
        }
        let options = K::OPTIONS;
        let dedupe_key = options
            .dedupe
            .and_then(|template| render_key(template, &payload));
        Ok(Self {
            kind: K::NAME,
            queue: options.queue.to_string(),
            payload,
            priority: options.priority,
            max_attempts: options.retry.max_attempts,
            run_at: RunAt::Now,
            dedupe_key,
            dedupe_scope: options.dedupe_scope,
        })
    }

    /// Runs no sooner than `delay` after enqueue.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.run_at = RunAt::After(delay);
        self
    }

    /// Runs no sooner than `when`.
    pub fn run_at(mut self, when: SystemTime) -> Self {
        self.run_at = RunAt::At(when);
        self
    }

    /// Overrides the kind's priority (higher runs first).
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }

    /// Sends the job to another queue than the kind's default.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }
}
