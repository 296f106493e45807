//! What a job handler returns when it does not succeed, and how that is classified.
//!
//! Outcomes are types, never parsed from messages: a [`JobError`] is transient (retry with
//! backoff), permanent (dead at once), retry-after (retry at a given delay), a snooze (run again
//! later without using an attempt) or a cancellation.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

/// A boxed error that can cross threads.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// What a job handler returns: `Ok(output)` completes the job, storing `output` with it (nothing
/// for `()`, the default).
pub type JobResult<T = ()> = Result<T, JobError>;

/// How an error should be treated by the retry machinery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Worth retrying: retried with exponential backoff until attempts run out.
    Transient,
    /// Will fail the same way every time (bad input, a 4xx answer): the job goes dead at once.
    Permanent,
    /// Retry after this delay (for example a server's `Retry-After`), still using an attempt.
    RetryAfter(Duration),
}

/// Declares how an application's own error type is classified, so `?` on it does the right thing.
///
/// Implement it once and mark the impl with `#[jobs::error_class]`, which also registers it:
///
/// ```ignore
/// #[jobs::error_class]
/// impl jobs::ClassifyError for PaymentError {
///     fn class(&self) -> jobs::ErrorClass {
///         match self {
///             PaymentError::CardDeclined => jobs::ErrorClass::Permanent,
///             PaymentError::RateLimited(wait) => jobs::ErrorClass::RetryAfter(*wait),
///             PaymentError::Network(_) => jobs::ErrorClass::Transient,
///         }
///     }
/// }
/// ```
///
/// Errors of types without a classification are transient. The classification is found through
/// the whole `source()` chain, so an error wrapped in another still counts.
pub trait ClassifyError: StdError + Send + Sync + 'static {
    /// The class of this error.
    fn class(&self) -> ErrorClass;
}

/// A registered classification for one error type; created by `#[jobs::error_class]`.
#[doc(hidden)]
pub struct ErrorClassifier {
    classify: fn(&(dyn StdError + 'static)) -> Option<ErrorClass>,
}

impl ErrorClassifier {
    /// The classifier of error type `E`.
    pub const fn of<E: ClassifyError>() -> Self {
        Self {
            classify: classify_as::<E>,
        }
    }
}

fn classify_as<E: ClassifyError>(error: &(dyn StdError + 'static)) -> Option<ErrorClass> {
    error.downcast_ref::<E>().map(ClassifyError::class)
}

inventory::collect!(ErrorClassifier);

/// Finds the registered class of an error, walking its `source()` chain; transient when none.
pub fn classify(error: &(dyn StdError + 'static)) -> ErrorClass {
    let mut current = Some(error);
    while let Some(error) = current {
        for classifier in inventory::iter::<ErrorClassifier> {
            if let Some(class) = (classifier.classify)(error) {
                return class;
            }
        }
        current = error.source();
    }
    ErrorClass::Transient
}

/// What a job handler returns when it does not complete the job.
///
/// Any error converts into it with `?` (transient unless its type is classified otherwise);
/// the constructors say what to do explicitly.
pub struct JobError {
    disposition: Disposition,
    source: Option<BoxError>,
}

/// What the worker does with a job whose handler returned a [`JobError`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// Retry with backoff, or go dead when attempts are used up.
    Retry,
    /// Retry after the given delay, or go dead when attempts are used up.
    RetryAfter(Duration),
    /// Go dead at once, keeping the error.
    Fail,
    /// Run again after the given delay without using an attempt.
    Snooze(Duration),
    /// Stop for good without being an error: the job ends cancelled with this reason.
    Cancel(String),
}

impl JobError {
    /// A failure worth retrying with backoff.
    pub fn transient(error: impl Into<BoxError>) -> Self {
        Self::with(Disposition::Retry, error)
    }

    /// A failure that will not go away by retrying: the job goes dead at once.
    pub fn permanent(error: impl Into<BoxError>) -> Self {
        Self::with(Disposition::Fail, error)
    }

    /// A failure to retry after `delay` (for example a server's `Retry-After`).
    pub fn retry_after(delay: Duration, error: impl Into<BoxError>) -> Self {
        Self::with(Disposition::RetryAfter(delay), error)
    }

    /// Run the job again after `delay` without using an attempt (not a failure).
    pub fn snooze(delay: Duration) -> Self {
        Self {
            disposition: Disposition::Snooze(delay),
            source: None,
        }
    }

    /// End the job as cancelled, with a reason kept on the job (not a failure, never retried).
    pub fn cancel(reason: impl Into<String>) -> Self {
        Self {
            disposition: Disposition::Cancel(reason.into()),
            source: None,
        }
    }

    fn with(disposition: Disposition, error: impl Into<BoxError>) -> Self {
        Self {
            disposition,
            source: Some(error.into()),
        }
    }

    /// What the worker will do with the job.
    pub fn disposition(&self) -> &Disposition {
        &self.disposition
    }

    /// The underlying error, when there is one.
    pub fn source(&self) -> Option<&(dyn StdError + Send + Sync + 'static)> {
        self.source.as_deref()
    }

    /// The message kept in the job's error history: the error and its sources, joined by `: `.
    pub fn message(&self) -> String {
        match (&self.disposition, &self.source) {
            (Disposition::Cancel(reason), _) => reason.clone(),
            (Disposition::Snooze(delay), None) => format!("snoozed for {delay:?}"),
            (_, None) => String::from("unknown error"),
            (_, Some(source)) => error_chain(source.as_ref()),
        }
    }
}

/// Formats an error with its whole `source()` chain, `outer: inner: innermost`.
pub fn error_chain(error: &(dyn StdError + 'static)) -> String {
    let mut message = error.to_string();
    let mut current = error.source();
    while let Some(source) = current {
        let text = source.to_string();
        if !message.ends_with(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        current = source.source();
    }
    message
}

impl<E: StdError + Send + Sync + 'static> From<E> for JobError {
    fn from(error: E) -> Self {
        let disposition = match classify(&error) {
            ErrorClass::Transient => Disposition::Retry,
            ErrorClass::Permanent => Disposition::Fail,
            ErrorClass::RetryAfter(delay) => Disposition::RetryAfter(delay),
        };
        Self::with(disposition, error)
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobError")
            .field("disposition", &self.disposition)
            .field("message", &self.message())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("card declined")]
    struct Declined;

    impl ClassifyError for Declined {
        fn class(&self) -> ErrorClass {
            ErrorClass::Permanent
        }
    }

    inventory::submit!(ErrorClassifier::of::<Declined>());

    #[derive(Debug, thiserror::Error)]
    #[error("charge failed")]
    struct ChargeFailed(#[source] Declined);

    #[test]
    fn unclassified_errors_are_transient() {
        let error: JobError = std::io::Error::other("connection reset").into();
        assert_eq!(error.disposition(), &Disposition::Retry);
        assert_eq!(error.message(), "connection reset");
    }

    #[test]
    fn classified_errors_keep_their_class_through_question_mark() {
        fn charge() -> JobResult {
            Err(Declined)?
        }
        assert_eq!(charge().unwrap_err().disposition(), &Disposition::Fail);
    }

    #[test]
    fn classification_is_found_in_the_source_chain() {
        let error: JobError = ChargeFailed(Declined).into();
        assert_eq!(error.disposition(), &Disposition::Fail);
        assert_eq!(error.message(), "charge failed: card declined");
    }

    #[test]
    fn explicit_constructors_accept_plain_messages() {
        let error = JobError::permanent("no such user");
        assert_eq!(error.disposition(), &Disposition::Fail);
        assert_eq!(error.to_string(), "no such user");
        let error = JobError::retry_after(Duration::from_secs(5), "429");
        assert_eq!(
            error.disposition(),
            &Disposition::RetryAfter(Duration::from_secs(5))
        );
    }
}
