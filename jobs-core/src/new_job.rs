//! A job about to be enqueued: encoded payload plus per-call options.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::dedupe::{render_key, DedupeScope, KeyError, TemplateError};
use crate::dependency::{merge_dependencies, Dependency, Prerequisites};
use crate::kind::JobKind;
use crate::name::{check_queue_name, NameError};
use crate::payload::{check_payload, encode_payload, PayloadProblem, MAX_PAYLOAD_DEPTH};
use crate::retry::{MaxAttemptsError, RetryPolicy};

/// Seconds from the Unix epoch to 0001-01-01T00:00:00Z, the earliest time a job may be set to
/// run at.
const EARLIEST_RUN_AT_SECS: u64 = 62_135_596_800;

/// Seconds from the Unix epoch to 10000-01-01T00:00:00Z: a job must become ready before then.
/// PostgreSQL stores times up to the year 294276; the margin keeps a `delay` measured by the
/// database clock well inside it whatever the two clocks say.
const LATEST_RUN_AT_SECS: u64 = 253_402_300_800;

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
    /// The arguments nest arrays and objects deeper than a worker can decode.
    #[error(
        "arguments of job kind `{kind}` nest deeper than {limit} arrays or objects, which no worker can decode"
    )]
    TooDeep {
        /// The job kind.
        kind: &'static str,
        /// The deepest nesting allowed ([`MAX_PAYLOAD_DEPTH`]).
        limit: usize,
    },
    /// A value holds the character U+0000, which PostgreSQL cannot store.
    #[error("the {field} of job kind `{kind}` contains U+0000, which PostgreSQL cannot store")]
    NulCharacter {
        /// The job kind.
        kind: &'static str,
        /// Where: `payload.<path>` (with ` (key)` when an object key holds it), `dedupe_key`,
        /// `fair_key` or `limit_key` (from the template's literal text). A queue name holding it is an
        /// [`EncodeError::QueueName`].
        field: String,
    },
    /// The dedupe template names a field the encoded arguments lack (skipped when serializing).
    #[error(
        "the dedupe key of job kind `{kind}` names `{field}`, which the encoded arguments lack"
    )]
    DedupeFieldMissing {
        /// The job kind.
        kind: &'static str,
        /// The missing field.
        field: String,
    },
    /// The kind's dedupe template is malformed (the macro rules that out at compile time).
    #[error("the dedupe template of job kind `{kind}` is malformed: {source}")]
    DedupeTemplate {
        /// The job kind.
        kind: &'static str,
        /// What is wrong with it.
        #[source]
        source: TemplateError,
    },
    /// A key template (`fair_key`, `limit_key`) names a field the encoded arguments lack
    /// (skipped when serializing).
    #[error("the {key} of job kind `{kind}` names `{field}`, which the encoded arguments lack")]
    KeyFieldMissing {
        /// The job kind.
        kind: &'static str,
        /// Which key: `fair_key` or `limit_key`.
        key: &'static str,
        /// The missing field.
        field: String,
    },
    /// A key template (`fair_key`, `limit_key`) of the kind is malformed (the macro rules that
    /// out at compile time).
    #[error("the {key} template of job kind `{kind}` is malformed: {source}")]
    KeyTemplate {
        /// The job kind.
        kind: &'static str,
        /// Which key: `fair_key` or `limit_key`.
        key: &'static str,
        /// What is wrong with it.
        #[source]
        source: TemplateError,
    },
    /// A rendered fairness or limit key is longer than [`MAX_KEY_BYTES`]: it would not fit the
    /// indexes that claims read the keys' jobs through.
    #[error(
        "the {key} of job kind `{kind}` is {bytes} bytes long; at most {limit} are allowed (template fields such as a tenant's id keep it short)"
    )]
    KeyTooLong {
        /// The job kind.
        kind: &'static str,
        /// Which key: `fair_key` or `limit_key`.
        key: &'static str,
        /// Its length in bytes.
        bytes: usize,
        /// The longest allowed ([`MAX_KEY_BYTES`]).
        limit: usize,
    },
    /// The job would become ready before the year 1 or from the year 10000 on (a `delay` such
    /// as `Duration::MAX`, or a far `run_at`).
    #[error("job of kind `{kind}` would become ready outside the years 1 to 9999 (UTC)")]
    RunAtOutOfRange {
        /// The job kind.
        kind: &'static str,
    },
    /// The queue name breaks the [name rules](crate::name) (a per-call `.queue(..)` override:
    /// the kind's own queue is checked at compile time and at registration).
    #[error("job of kind `{kind}`: {source}")]
    QueueName {
        /// The job kind.
        kind: &'static str,
        /// What is wrong with the name.
        #[source]
        source: NameError,
    },
    /// `max_attempts` is 0 or larger than the database's integer (a `NewJob` built by hand:
    /// the kind's own count is checked at compile time and at registration).
    #[error("job of kind `{kind}`: {source}")]
    MaxAttempts {
        /// The job kind.
        kind: &'static str,
        /// The refused count.
        #[source]
        source: MaxAttemptsError,
    },
}

impl EncodeError {
    fn payload_problem(kind: &'static str, problem: PayloadProblem) -> Self {
        match problem {
            PayloadProblem::TooDeep => EncodeError::TooDeep {
                kind,
                limit: MAX_PAYLOAD_DEPTH,
            },
            PayloadProblem::NulCharacter(field) => EncodeError::NulCharacter { kind, field },
        }
    }
}

/// The longest fairness or limit key, in bytes: keys are entries of a B-tree index, whose
/// entries must stay well under a third of a page.
pub const MAX_KEY_BYTES: usize = 512;

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
    /// The rendered fairness key, when the kind declares a
    /// [`fair_key`](crate::JobOptions::fair_key) template: jobs of the kind are claimed
    /// round-robin across these keys.
    pub fair_key: Option<String>,
    /// The rendered limit key, when the kind declares a
    /// [`limit_key`](crate::JobOptions::limit_key) template: the kind's per-key limits count
    /// the jobs that share it.
    pub limit_key: Option<String>,
    /// The jobs it runs after: it waits until every one has ended (see [`Dependency`]).
    pub after: Vec<Dependency>,
}

impl NewJob {
    /// Encodes `args` of kind `K` with the kind's default options.
    ///
    /// Arguments nested deeper than a worker can decode are refused here, without serializing
    /// past the limit (so arguments thousands of levels deep cannot overflow the stack); the rest
    /// of [`NewJob::check`] runs at enqueue, after per-call options are set.
    pub fn of<K: JobKind>(args: &K::Args) -> Result<Self, EncodeError> {
        let payload = encode_payload(args).map_err(|error| match error {
            Ok(problem) => EncodeError::payload_problem(K::NAME, problem),
            Err(source) => EncodeError::Payload {
                kind: K::NAME,
                source,
            },
        })?;
        if !payload.is_object() {
            return Err(EncodeError::NotAnObject { kind: K::NAME });
        }
        let options = K::OPTIONS;
        let dedupe_key = match options.dedupe {
            None => None,
            Some(template) => {
                Some(render_key(template, &payload).map_err(|error| match error {
                    KeyError::MissingField(field) => EncodeError::DedupeFieldMissing {
                        kind: K::NAME,
                        field,
                    },
                    KeyError::Template(source) => EncodeError::DedupeTemplate {
                        kind: K::NAME,
                        source,
                    },
                })?)
            }
        };
        let fair_key = render_job_key::<K>("fair_key", options.fair_key, &payload)?;
        let limit_key = render_job_key::<K>("limit_key", options.limit_key, &payload)?;
        Ok(Self {
            kind: K::NAME,
            queue: options.queue.to_string(),
            payload,
            priority: options.priority,
            max_attempts: options.retry.max_attempts,
            run_at: RunAt::Now,
            dedupe_key,
            dedupe_scope: options.dedupe_scope,
            fair_key,
            limit_key,
            after: Vec::new(),
        })
    }

    /// Checks everything PostgreSQL would refuse, or a worker could never decode, before the job
    /// reaches a connection: the payload's depth and U+0000 anywhere in it (object keys too), in
    /// the dedupe, fairness and limit keys; a fairness or limit key too long to index; a queue name that breaks the [name rules](crate::name); a `max_attempts`
    /// the database cannot store; a ready time outside the years 1 to 9999. Every enqueue path
    /// calls it first, so a refused job leaves the caller's transaction as it was.
    pub fn check(&self) -> Result<(), EncodeError> {
        let kind = self.kind;
        check_payload(&self.payload)
            .map_err(|problem| EncodeError::payload_problem(kind, problem))?;
        if self
            .dedupe_key
            .as_deref()
            .is_some_and(|key| key.contains('\0'))
        {
            return Err(EncodeError::NulCharacter {
                kind,
                field: "dedupe_key".into(),
            });
        }
        for (name, key) in [("fair_key", &self.fair_key), ("limit_key", &self.limit_key)] {
            let Some(key) = key else { continue };
            if key.contains('\0') {
                return Err(EncodeError::NulCharacter {
                    kind,
                    field: name.into(),
                });
            }
            if key.len() > MAX_KEY_BYTES {
                return Err(EncodeError::KeyTooLong {
                    kind,
                    key: name,
                    bytes: key.len(),
                    limit: MAX_KEY_BYTES,
                });
            }
        }
        check_queue_name(&self.queue).map_err(|source| EncodeError::QueueName { kind, source })?;
        RetryPolicy::check_max_attempts(self.max_attempts)
            .map_err(|source| EncodeError::MaxAttempts { kind, source })?;
        if !run_at_in_range(self.run_at, SystemTime::now()) {
            return Err(EncodeError::RunAtOutOfRange { kind });
        }
        Ok(())
    }

    /// Runs after every job of `prerequisites` has ended: it waits (state `waiting`) until then,
    /// and is cancelled at once if one ends dead or cancelled, unless that dependency says
    /// [`run_on_failure`](Dependency::run_on_failure). Adds to the prerequisites named before;
    /// a job named twice counts once.
    pub fn after(mut self, prerequisites: impl Prerequisites) -> Self {
        self.after.extend(prerequisites.into_dependencies());
        merge_dependencies(&mut self.after);
        self
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

/// Renders key `name` (`fair_key`, `limit_key`) of a job of kind `K` from `template`, when the
/// kind declares one.
fn render_job_key<K: JobKind>(
    name: &'static str,
    template: Option<&'static str>,
    payload: &Value,
) -> Result<Option<String>, EncodeError> {
    let Some(template) = template else {
        return Ok(None);
    };
    render_key(template, payload)
        .map(Some)
        .map_err(|error| match error {
            KeyError::MissingField(field) => EncodeError::KeyFieldMissing {
                kind: K::NAME,
                key: name,
                field,
            },
            KeyError::Template(source) => EncodeError::KeyTemplate {
                kind: K::NAME,
                key: name,
                source,
            },
        })
}

/// Whether a job enqueued at `now` with `run_at` becomes ready within the years 1 to 9999.
fn run_at_in_range(run_at: RunAt, now: SystemTime) -> bool {
    let earliest = UNIX_EPOCH.checked_sub(Duration::from_secs(EARLIEST_RUN_AT_SECS));
    let latest = UNIX_EPOCH + Duration::from_secs(LATEST_RUN_AT_SECS);
    let ready = match run_at {
        RunAt::Now => return true,
        RunAt::After(delay) => now.checked_add(delay),
        RunAt::At(when) => Some(when),
    };
    match ready {
        Some(ready) => ready < latest && earliest.is_none_or(|earliest| ready >= earliest),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_times_postgres_cannot_store_are_out_of_range() {
        let now = SystemTime::now();
        assert!(run_at_in_range(RunAt::Now, now));
        assert!(run_at_in_range(
            RunAt::After(Duration::from_secs(86_400)),
            now
        ));
        assert!(!run_at_in_range(RunAt::After(Duration::MAX), now));
        let year_9999 = UNIX_EPOCH + Duration::from_secs(LATEST_RUN_AT_SECS - 1);
        assert!(run_at_in_range(RunAt::At(year_9999), now));
        assert!(!run_at_in_range(
            RunAt::At(year_9999 + Duration::from_secs(1)),
            now
        ));
        assert!(run_at_in_range(RunAt::At(UNIX_EPOCH), now));
        if let Some(before_year_1) =
            UNIX_EPOCH.checked_sub(Duration::from_secs(EARLIEST_RUN_AT_SECS + 1))
        {
            assert!(!run_at_in_range(RunAt::At(before_year_1), now));
        }
    }

    fn hand_built(queue: &str, max_attempts: u32) -> NewJob {
        NewJob {
            kind: "by_hand",
            queue: queue.into(),
            payload: serde_json::json!({}),
            priority: 0,
            max_attempts,
            run_at: RunAt::Now,
            dedupe_key: None,
            dedupe_scope: DedupeScope::default(),
            fair_key: None,
            limit_key: None,
            after: Vec::new(),
        }
    }

    #[test]
    fn a_hand_built_job_follows_the_name_and_attempt_rules() {
        assert!(hand_built("default", 8).check().is_ok());
        for queue in ["", "two words", "nul\0", &"q".repeat(129)] {
            assert!(
                matches!(
                    hand_built(queue, 8).check(),
                    Err(EncodeError::QueueName { .. })
                ),
                "{queue:?}"
            );
        }
        for max_attempts in [0, 3_000_000_000] {
            assert!(
                matches!(
                    hand_built("default", max_attempts).check(),
                    Err(EncodeError::MaxAttempts { .. })
                ),
                "{max_attempts}"
            );
        }
    }
}
