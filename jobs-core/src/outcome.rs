//! From the end of one run to what happens to the job next: a pure decision.

use std::time::Duration;

use crate::error::{Disposition, JobError};
use crate::output::EncodedOutput;
use crate::retry::RetryPolicy;

/// How one run of a job ended.
#[derive(Debug)]
pub enum RunOutcome {
    /// The handler returned `Ok`, with its output encoded (`None` for `()`).
    Completed(Option<EncodedOutput>),
    /// The handler returned an error.
    Failed(JobError),
    /// The handler panicked, with the panic message.
    Panicked(String),
    /// The run took longer than the kind's timeout.
    TimedOut(Duration),
    /// The payload does not decode into the kind's arguments.
    Undecodable(String),
}

/// What went wrong in one attempt, as kept in the job's error history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptError {
    /// The kind of failure: `transient`, `permanent`, `retry_after`, `panic`, `timeout`,
    /// `undecodable` or `lease_expired`.
    pub kind: &'static str,
    /// The message.
    pub message: String,
}

/// What to do with a job after a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Mark it done, storing its output (`None`: NULL, for `()`).
    Complete {
        /// The run's output, encoded.
        output: Option<EncodedOutput>,
    },
    /// Make it ready again after `delay`, keeping the error.
    Retry {
        /// Wait before the next attempt.
        delay: Duration,
        /// The error of this attempt.
        error: AttemptError,
    },
    /// Mark it dead, keeping the error.
    Dead {
        /// The error of this (last) attempt.
        error: AttemptError,
    },
    /// Make it ready again after `delay` without using an attempt.
    Snooze {
        /// Wait before running again.
        delay: Duration,
    },
    /// Mark it cancelled with a reason.
    Cancel {
        /// Why.
        reason: String,
    },
}

/// Decides what follows a run of attempt `attempt` (1-based) under `policy`, with a jitter sample
/// in `[0, 1)` for the backoff.
pub fn decide(
    outcome: RunOutcome,
    attempt: u32,
    policy: &RetryPolicy,
    jitter_sample: f64,
) -> Decision {
    let retry_or_dead = |kind: &'static str, message: String, delay: Duration| {
        let error = AttemptError { kind, message };
        if policy.has_attempts_left(attempt) {
            Decision::Retry { delay, error }
        } else {
            Decision::Dead { error }
        }
    };
    let backoff = policy.backoff(attempt, jitter_sample);
    match outcome {
        RunOutcome::Completed(output) => Decision::Complete { output },
        RunOutcome::Panicked(message) => retry_or_dead("panic", message, backoff),
        RunOutcome::TimedOut(limit) => {
            retry_or_dead("timeout", format!("timed out after {limit:?}"), backoff)
        }
        RunOutcome::Undecodable(message) => Decision::Dead {
            error: AttemptError {
                kind: "undecodable",
                message,
            },
        },
        RunOutcome::Failed(error) => {
            let message = error.message();
            match error.disposition() {
                Disposition::Retry => retry_or_dead("transient", message, backoff),
                Disposition::RetryAfter(delay) => retry_or_dead("retry_after", message, *delay),
                Disposition::Fail => Decision::Dead {
                    error: AttemptError {
                        kind: "permanent",
                        message,
                    },
                },
                Disposition::Snooze(delay) => Decision::Snooze { delay: *delay },
                Disposition::Cancel(reason) => Decision::Cancel {
                    reason: reason.clone(),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            ..RetryPolicy::DEFAULT
        }
    }

    #[test]
    fn transient_errors_retry_until_attempts_run_out() {
        let failed = || RunOutcome::Failed(JobError::transient("smtp down"));
        assert!(matches!(
            decide(failed(), 2, &policy(3), 0.0),
            Decision::Retry { delay, .. } if delay == Duration::from_secs(60)
        ));
        assert!(matches!(
            decide(failed(), 3, &policy(3), 0.0),
            Decision::Dead { error } if error.kind == "transient" && error.message == "smtp down"
        ));
    }

    #[test]
    fn permanent_errors_and_bad_payloads_go_dead_at_once() {
        let outcome = RunOutcome::Failed(JobError::permanent("bad email"));
        assert!(matches!(
            decide(outcome, 1, &policy(8), 0.0),
            Decision::Dead { .. }
        ));
        let outcome = RunOutcome::Undecodable("missing field".into());
        assert!(
            matches!(decide(outcome, 1, &policy(8), 0.0), Decision::Dead { error } if error.kind == "undecodable")
        );
    }

    #[test]
    fn panics_and_timeouts_are_transient() {
        let outcome = RunOutcome::Panicked("boom".into());
        assert!(
            matches!(decide(outcome, 1, &policy(2), 0.0), Decision::Retry { error, .. } if error.kind == "panic")
        );
        let outcome = RunOutcome::TimedOut(Duration::from_secs(1));
        assert!(
            matches!(decide(outcome, 1, &policy(2), 0.0), Decision::Retry { error, .. } if error.kind == "timeout")
        );
    }

    #[test]
    fn a_completed_run_carries_its_output_to_the_decision() {
        let output = crate::output::encode_output(&42).unwrap();
        assert_eq!(
            decide(RunOutcome::Completed(output.clone()), 1, &policy(8), 0.0),
            Decision::Complete { output }
        );
        assert_eq!(
            decide(RunOutcome::Completed(None), 1, &policy(8), 0.0),
            Decision::Complete { output: None }
        );
    }

    #[test]
    fn retry_after_uses_the_given_delay_and_snooze_uses_no_attempt() {
        let outcome = RunOutcome::Failed(JobError::retry_after(Duration::from_secs(7), "429"));
        assert!(
            matches!(decide(outcome, 1, &policy(8), 0.0), Decision::Retry { delay, .. } if delay == Duration::from_secs(7))
        );
        let outcome = RunOutcome::Failed(JobError::snooze(Duration::from_secs(9)));
        assert_eq!(
            decide(outcome, 8, &policy(8), 0.0),
            Decision::Snooze {
                delay: Duration::from_secs(9)
            }
        );
    }
}
