//! What a running job knows about itself, and its links back to the worker: shutdown, the
//! lease the worker holds on it, and an operator's request to cancel it.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::future::BoxFuture;

/// The identity of a job row.
pub type JobId = i64;

/// Why [`JobContext::renew_lease`] did not renew the lease.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The lease is gone: a rescue or another worker took the job (this worker was paused, cut
    /// off or too slow). Nothing this run does will be recorded: stop and return.
    #[error(
        "lease lost: another worker or a rescue took the job; this run's outcome will be dropped"
    )]
    Lost,
    /// The database could not be reached. The lease still holds until it expires, unless a
    /// later renewal (by this call again, or the worker's heartbeat) gets through.
    #[error("could not renew the lease: {reason}")]
    Unavailable {
        /// What went wrong.
        reason: String,
    },
    /// The worker no longer tracks this run: it stopped, or the run is over.
    #[error("the worker no longer runs this job")]
    NotRunning,
}

/// A backend's hold on the lease of one running job: what [`JobContext::renew_lease`] calls.
///
/// Backends implement it and hand it to the context with [`JobContext::with_lease`]; it keeps
/// this crate free of any database driver.
pub trait LeaseControl: Send + Sync + fmt::Debug {
    /// Renews the lease now, in the database, and says whether it still holds.
    fn renew(&self) -> BoxFuture<'_, Result<(), LeaseError>>;
}

/// Handed to every job handler that takes it as a parameter: who the job is and which attempt
/// this is, plus signals from the worker (shutdown, lease lost, cancellation requested) and
/// explicit lease renewal.
#[derive(Debug, Clone)]
pub struct JobContext {
    id: JobId,
    kind: &'static str,
    queue: String,
    attempt: u32,
    max_attempts: u32,
    dedupe_key: Option<String>,
    lease: Duration,
    enqueued_at: Option<DateTime<Utc>>,
    shutdown: watch::Receiver<bool>,
    lease_control: Option<Arc<dyn LeaseControl>>,
    lease_lost: Option<watch::Receiver<bool>>,
    cancel: Option<watch::Receiver<bool>>,
    backend: Option<Arc<dyn Any + Send + Sync>>,
}

impl JobContext {
    /// Builds a context; called by backends when they start a run.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: JobId,
        kind: &'static str,
        queue: String,
        attempt: u32,
        max_attempts: u32,
        dedupe_key: Option<String>,
        lease: Duration,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        Self {
            id,
            kind,
            queue,
            attempt,
            max_attempts,
            dedupe_key,
            lease,
            enqueued_at: None,
            shutdown,
            lease_control: None,
            lease_lost: None,
            cancel: None,
            backend: None,
        }
    }

    /// Records when the job was enqueued (its row's creation time), which makes
    /// [`idempotency_key`](Self::idempotency_key) unique beyond one database. Called by backends.
    pub fn with_enqueued_at(mut self, enqueued_at: DateTime<Utc>) -> Self {
        self.enqueued_at = Some(enqueued_at);
        self
    }

    /// Links the context to the worker's lease on this run: `control` renews it on demand, and
    /// `lost` turns `true` when the worker finds the lease lost. Called by backends.
    pub fn with_lease(
        mut self,
        control: Arc<dyn LeaseControl>,
        lost: watch::Receiver<bool>,
    ) -> Self {
        self.lease_control = Some(control);
        self.lease_lost = Some(lost);
        self
    }

    /// Links the context to the worker's news of a cancellation request: `requested` turns
    /// `true` when an operator asks to cancel the job while it runs. Called by backends.
    pub fn with_cancel_requests(mut self, requested: watch::Receiver<bool>) -> Self {
        self.cancel = Some(requested);
        self
    }

    /// Attaches the backend's own handle on this run, for the backend's extensions of the
    /// context (such as a transaction that completes the job). Called by backends.
    pub fn with_backend(mut self, backend: Arc<dyn Any + Send + Sync>) -> Self {
        self.backend = Some(backend);
        self
    }

    /// The handle a backend attached with [`with_backend`](Self::with_backend), if it is of
    /// type `T`. Used by backends' extensions of the context.
    pub fn backend<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.backend
            .as_ref()
            .and_then(|backend| Arc::clone(backend).downcast::<T>().ok())
    }

    /// A context for calling a handler directly in a unit test: attempt 1, no shutdown, a lease
    /// that is never lost (renewing it succeeds without doing anything).
    pub fn for_test(kind: &'static str) -> Self {
        let (_sender, shutdown) = watch::channel(false);
        Self::new(
            0,
            kind,
            String::from("default"),
            1,
            1,
            None,
            Duration::from_secs(30),
            shutdown,
        )
    }

    /// The job's id.
    pub fn id(&self) -> JobId {
        self.id
    }

    /// The job's kind (its stable name).
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The queue the job was taken from.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Which attempt this run is, starting at 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Attempts allowed in all.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// Whether this is the last attempt the job gets.
    pub fn is_last_attempt(&self) -> bool {
        self.attempt >= self.max_attempts
    }

    /// The job's dedupe key, when its kind declares one.
    pub fn dedupe_key(&self) -> Option<&str> {
        self.dedupe_key.as_deref()
    }

    /// The lease the worker holds on this job, renewed by heartbeats while the job runs.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Renews this job's lease now, in the database, rather than waiting for the worker's next
    /// heartbeat. Heartbeats renew leases on their own while the job runs; call this from work
    /// that may starve them, such as a long stretch of blocking code (from a blocking thread,
    /// `tokio::runtime::Handle::block_on(ctx.renew_lease())`), or to learn whether the lease
    /// still holds before an expensive step.
    ///
    /// [`LeaseError::Lost`] means another worker or a rescue took the job: this run's outcome
    /// will be dropped, so stop. Without a backend behind it (as in
    /// [`for_test`](Self::for_test)) it succeeds without doing anything.
    pub async fn renew_lease(&self) -> Result<(), LeaseError> {
        match &self.lease_control {
            Some(control) => control.renew().await,
            None => Ok(()),
        }
    }

    /// Whether the worker found this job's lease lost (by a heartbeat or a renewal): another
    /// worker or a rescue took the job, and this run's outcome will be dropped.
    pub fn is_lease_lost(&self) -> bool {
        self.lease_lost.as_ref().is_some_and(|lost| *lost.borrow())
    }

    /// Resolves when the worker finds this job's lease lost, so that a long job can stop early
    /// (`tokio::select!` it against the work). Never resolves while the lease holds.
    pub async fn lease_lost(&self) {
        if let Some(lost) = &self.lease_lost {
            let mut lost = lost.clone();
            if lost.wait_for(|lost| *lost).await.is_ok() {
                return;
            }
        }
        // No backend behind this context, or the worker forgot the run: never lost.
        std::future::pending::<()>().await;
    }

    /// A key that is the same on every attempt of this job, for external providers'
    /// idempotency headers (`Idempotency-Key`, a message id).
    ///
    /// - With a dedupe key: `kind#key:<dedupe key>`, the same for every job holding that key.
    ///   When that would be longer than the 255 bytes providers accept, or the key has
    ///   characters outside printable ASCII, the key is replaced by its digest:
    ///   `kind#key-sha256:<64 hex digits>`.
    /// - Without: `kind#job:<id>:<microseconds since 1970 when enqueued>`. The enqueue time
    ///   keeps the key unique beyond one database: ids repeat after a restore to an earlier
    ///   point, an identity reset, or in another database sending to the same provider.
    ///
    /// Always printable ASCII, at most 255 bytes (kind names are at most 128). `#` cannot occur
    /// in a kind name, so the kind ends at the first one and the keys of two kinds never meet
    /// (kind names may hold `:`); after it, the forms never meet either.
    pub fn idempotency_key(&self) -> String {
        match (&self.dedupe_key, self.enqueued_at) {
            (Some(key), _) => {
                let plain = format!("{}#key:{key}", self.kind);
                if plain.len() <= MAX_IDEMPOTENCY_KEY_BYTES && is_header_safe(key) {
                    plain
                } else {
                    format!("{}#key-sha256:{}", self.kind, sha256_hex(key))
                }
            }
            (None, Some(enqueued_at)) => format!(
                "{}#job:{}:{}",
                self.kind,
                self.id,
                enqueued_at.timestamp_micros()
            ),
            (None, None) => format!("{}#job:{}", self.kind, self.id),
        }
    }

    /// Whether an operator asked to cancel this job while it runs (`jobs job cancel`,
    /// `jobs::admin::cancel`). The worker learns it at once from the request's announcement,
    /// or at the latest at its next heartbeat.
    ///
    /// The request is not an interruption: the job decides. If this run ends in an error (any
    /// error: it is not retried), the job is `cancelled`; if it succeeds, it is `done`. A long
    /// job checks it between steps and returns an error saying it stopped, or awaits
    /// [`cancel_signal`](Self::cancel_signal) against its work. Always `false` without a
    /// backend behind the context (as in [`for_test`](Self::for_test)).
    pub fn cancel_requested(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|requested| *requested.borrow())
    }

    /// Resolves when an operator asks to cancel this job (see
    /// [`cancel_requested`](Self::cancel_requested)), so that a long job can stop early
    /// (`tokio::select!` it against the work). Never resolves otherwise.
    pub async fn cancel_signal(&self) {
        if let Some(requested) = &self.cancel {
            let mut requested = requested.clone();
            if requested.wait_for(|requested| *requested).await.is_ok() {
                return;
            }
        }
        // No backend behind this context, or the worker forgot the run: never requested.
        std::future::pending::<()>().await;
    }

    /// Whether the worker has been asked to shut down; long jobs may check it and stop early.
    pub fn shutdown_requested(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Resolves when the worker is asked to shut down.
    pub async fn shutdown_signal(&self) {
        let mut shutdown = self.shutdown.clone();
        // An error means the worker is gone, which is a shutdown too.
        let _ = shutdown.wait_for(|requested| *requested).await;
    }
}

/// The longest key [`JobContext::idempotency_key`] writes: what payment providers accept.
const MAX_IDEMPOTENCY_KEY_BYTES: usize = 255;

/// Whether `text` is printable ASCII, which every header and provider accepts.
fn is_header_safe(text: &str) -> bool {
    text.bytes().all(|byte| (0x20..=0x7e).contains(&byte))
}

/// The SHA-256 of `text`, in lowercase hex.
fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency_key_is_stable_across_attempts() {
        let (_tx, rx) = watch::channel(false);
        let first = JobContext::new(7, "pay", "q".into(), 1, 8, None, Duration::ZERO, rx.clone());
        let second = JobContext::new(7, "pay", "q".into(), 2, 8, None, Duration::ZERO, rx.clone());
        assert_eq!(first.idempotency_key(), second.idempotency_key());
        let keyed = JobContext::new(
            7,
            "pay",
            "q".into(),
            1,
            8,
            Some("o:1".into()),
            Duration::ZERO,
            rx,
        );
        assert_eq!(keyed.idempotency_key(), "pay#key:o:1");
    }

    fn context(id: JobId, dedupe_key: Option<&str>) -> JobContext {
        context_of("pay", id, dedupe_key)
    }

    fn context_of(kind: &'static str, id: JobId, dedupe_key: Option<&str>) -> JobContext {
        let (_tx, rx) = watch::channel(false);
        JobContext::new(
            id,
            kind,
            "q".into(),
            1,
            8,
            dedupe_key.map(str::to_owned),
            Duration::ZERO,
            rx,
        )
    }

    #[test]
    fn the_idempotency_key_of_a_job_without_dedupe_key_names_its_enqueue_time() {
        let enqueued_at = DateTime::from_timestamp_micros(1_764_555_361_123_456).unwrap();
        let restored = DateTime::from_timestamp_micros(1_764_555_999_000_001).unwrap();
        let original = context(7, None).with_enqueued_at(enqueued_at);
        assert_eq!(original.idempotency_key(), "pay#job:7:1764555361123456");
        // Id 7 issued again (a restore, an identity reset, another database): another key.
        let reissued = context(7, None).with_enqueued_at(restored);
        assert_ne!(original.idempotency_key(), reissued.idempotency_key());
    }

    #[test]
    fn the_two_forms_of_idempotency_key_never_meet() {
        let enqueued_at = DateTime::from_timestamp_micros(5).unwrap();
        let by_id = context(7, None).with_enqueued_at(enqueued_at);
        let keyed_like_an_id = context(8, Some("job:7:5"));
        assert_ne!(by_id.idempotency_key(), keyed_like_an_id.idempotency_key());
    }

    #[test]
    fn the_idempotency_keys_of_two_kinds_never_meet() {
        // Kind names may hold `:`: `pay` keyed `key:x` and `pay:key` keyed `x` read alike
        // unless the kind ends where no kind name can go on.
        let enqueued_at = DateTime::from_timestamp_micros(5).unwrap();
        let pairs = [
            (
                context_of("pay", 1, Some("key:x")),
                context_of("pay:key", 1, Some("x")),
            ),
            (
                context_of("pay", 1, Some("job:7:5")),
                context_of("pay:key", 7, None).with_enqueued_at(enqueued_at),
            ),
        ];
        for (one, other) in pairs {
            assert_ne!(one.idempotency_key(), other.idempotency_key());
        }
    }

    #[test]
    fn long_or_unprintable_dedupe_keys_become_a_digest_within_255_bytes() {
        let longest_kind: &'static str = "k".repeat(crate::name::MAX_NAME_LEN).leak();
        let (_tx, rx) = watch::channel(false);
        let fits =
            "x".repeat(MAX_IDEMPOTENCY_KEY_BYTES - crate::name::MAX_NAME_LEN - "#key:".len());
        let at_room = JobContext::new(
            1,
            longest_kind,
            "q".into(),
            1,
            8,
            Some(fits.clone()),
            Duration::ZERO,
            rx,
        );
        assert_eq!(at_room.idempotency_key().len(), 255);
        assert!(at_room.idempotency_key().ends_with(&fits));
        let one_byte_over = "x".repeat(MAX_IDEMPOTENCY_KEY_BYTES - "pay#key:".len() + 1);
        let fits_after_a_short_kind = "x".repeat(MAX_IDEMPOTENCY_KEY_BYTES - "pay#key:".len());
        assert_eq!(
            context(1, Some(&fits_after_a_short_kind))
                .idempotency_key()
                .len(),
            MAX_IDEMPOTENCY_KEY_BYTES,
            "a key that fits is sent as it is"
        );
        let long = context(1, Some(&one_byte_over));
        let unprintable = context(1, Some("line\nbreak"));
        let accented = context(1, Some("caf\u{e9}"));
        for ctx in [long, unprintable, accented] {
            let key = ctx.idempotency_key();
            assert!(key.starts_with("pay#key-sha256:"), "{key}");
            assert_eq!(key.len(), "pay#key-sha256:".len() + 64);
            assert!(is_header_safe(&key));
        }
        assert_ne!(
            context(1, Some("line\nbreak")).idempotency_key(),
            context(1, Some("line\rbreak")).idempotency_key()
        );
    }

    #[derive(Debug)]
    struct Revoked;

    impl LeaseControl for Revoked {
        fn renew(&self) -> BoxFuture<'_, Result<(), LeaseError>> {
            Box::pin(async { Err(LeaseError::Lost) })
        }
    }

    #[tokio::test]
    async fn a_test_context_renews_and_never_loses_its_lease() {
        let ctx = JobContext::for_test("k");
        assert_eq!(ctx.renew_lease().await, Ok(()));
        assert!(!ctx.is_lease_lost());
        let lost = tokio::time::timeout(Duration::from_millis(10), ctx.lease_lost()).await;
        assert!(lost.is_err(), "a test context's lease is never lost");
    }

    #[tokio::test]
    async fn the_backend_signals_a_cancellation_request() {
        let plain = JobContext::for_test("k");
        assert!(!plain.cancel_requested());
        let never = tokio::time::timeout(Duration::from_millis(10), plain.cancel_signal()).await;
        assert!(never.is_err(), "a test context is never asked to cancel");

        let (requested_tx, requested_rx) = watch::channel(false);
        let ctx = JobContext::for_test("k").with_cancel_requests(requested_rx);
        assert!(!ctx.cancel_requested());
        let waiting = tokio::spawn({
            let ctx = ctx.clone();
            async move { ctx.cancel_signal().await }
        });
        requested_tx.send_replace(true);
        waiting.await.unwrap();
        assert!(ctx.cancel_requested());
    }

    #[tokio::test]
    async fn the_backend_renews_and_signals_a_lost_lease() {
        let (lost_tx, lost_rx) = watch::channel(false);
        let ctx = JobContext::for_test("k").with_lease(Arc::new(Revoked), lost_rx);
        assert_eq!(ctx.renew_lease().await, Err(LeaseError::Lost));
        assert!(!ctx.is_lease_lost());
        let waiting = tokio::spawn({
            let ctx = ctx.clone();
            async move { ctx.lease_lost().await }
        });
        lost_tx.send_replace(true);
        waiting.await.unwrap();
        assert!(ctx.is_lease_lost());
    }
}
