//! What a running job knows about itself.

use std::time::Duration;

use tokio::sync::watch;

/// The identity of a job row.
pub type JobId = i64;

/// Handed to every job handler that takes it as a parameter: who the job is and which attempt
/// this is, plus signals from the worker.
#[derive(Debug, Clone)]
pub struct JobContext {
    id: JobId,
    kind: &'static str,
    queue: String,
    attempt: u32,
    max_attempts: u32,
    dedupe_key: Option<String>,
    lease: Duration,
    shutdown: watch::Receiver<bool>,
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
            shutdown,
        }
    }

    /// A context for calling a handler directly in a unit test: attempt 1, no shutdown.
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

    /// A key that is the same on every attempt of this job, for external providers'
    /// idempotency headers: derived from the dedupe key when there is one, else from the id.
    pub fn idempotency_key(&self) -> String {
        match &self.dedupe_key {
            Some(key) => format!("{}:{}", self.kind, key),
            None => format!("{}:job-{}", self.kind, self.id),
        }
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
        assert_eq!(keyed.idempotency_key(), "pay:o:1");
    }
}
