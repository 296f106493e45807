//! One job run inline, in the test's task, without a worker or a database: [`run_job`].

use std::marker::PhantomData;
use std::sync::Arc;

use chrono::Utc;
use jobs_core::{
    Decision, EncodeError, JobContext, JobKind, NewJob, Registry, RegistryError, RetryPolicy,
    StateMap,
};
use tokio::sync::watch;

use crate::worker::executor::{decision_of, invocation_failure, run_caught};
use crate::worker::WorkerConfig;

/// Why [`RunJob::run`] could not run the job. Each is what would stop the job before it ever
/// ran in production: refused at enqueue, or by the worker at start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunJobError {
    /// The arguments cannot be enqueued (enqueue would refuse them the same way).
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The kind is not registered with `#[job]` in this program, two kinds share its name, or
    /// the job needs a state value the run was not given (a worker would refuse to start).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The attempt asked for is not one the job gets: attempts run from 1 to `max_attempts`.
    #[error(
        "attempt {attempt} of a `{kind}` job cannot run: its attempts run from 1 to {max_attempts}"
    )]
    AttemptOutOfRange {
        /// The kind.
        kind: &'static str,
        /// The attempt asked for.
        attempt: u32,
        /// Attempts the job gets in all.
        max_attempts: u32,
    },
}

/// Runs one job of kind `K` with `args` inline, in the test's task: no worker, no database
/// (see [`RunJob`] for the state values, the attempt and the backoff's jitter).
///
/// The answer is the [`Decision`] a worker would write after that run, by the same rules: the
/// handler runs on a task of its own (a panic is caught), within the kind's timeout, and the end
/// is classified with the kind's retry policy for the attempt. A test sees whether attempt N
/// completes, retries (and after how long), goes dead, snoozes or cancels.
///
/// The job's context is that of a job enqueued now and never stored: id 0, the kind's queue,
/// the dedupe key its template renders, shutdown never requested, a lease that renewing
/// succeeds on. A job that needs the worker's database ([`JobContextExt::transaction`]) gets
/// [`TransactionError::NoWorker`]: run it with [`drain`](super::drain()) instead.
///
/// [`JobContextExt::transaction`]: crate::JobContextExt::transaction
/// [`TransactionError::NoWorker`]: crate::TransactionError::NoWorker
///
/// ```no_run
/// # mod send_receipt { // What `#[job] async fn send_receipt(mailer: State<Mailer>, order_id: i64)` generates.
/// #     #[derive(serde::Serialize, serde::Deserialize)]
/// #     pub struct Args { pub order_id: i64 }
/// #     pub struct Job;
/// #     impl jobs_core::JobKind for Job {
/// #         const NAME: &'static str = "send_receipt";
/// #         type Args = Args;
/// #         type Output = ();
/// #         const OPTIONS: jobs_core::JobOptions = jobs_core::JobOptions::DEFAULT;
/// #     }
/// # }
/// # struct Mailer;
/// # impl Mailer { fn failing() -> Self { Mailer } }
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use jobs_core::Decision;
/// use jobs_postgres::testing::run_job;
///
/// let decision = run_job::<send_receipt::Job>(send_receipt::Args { order_id: 1042 })
///     .state(Mailer::failing())
///     .attempt(2)
///     .run()
///     .await?;
/// // The second of 8 attempts failed: the default backoff waits a minute before the third.
/// assert!(matches!(decision, Decision::Retry { delay, .. } if delay == Duration::from_secs(60)));
/// # Ok(())
/// # }
/// ```
pub fn run_job<K: JobKind>(args: K::Args) -> RunJob<K> {
    RunJob {
        args,
        states: StateMap::new(),
        attempt: 1,
        jitter_sample: 0.0,
        kind: PhantomData,
    }
}

/// One inline run of a job of kind `K`, built by [`run_job`]: state values, which attempt, and
/// the jitter of the backoff, then [`run`](Self::run).
#[must_use = "nothing runs until `.run().await`"]
pub struct RunJob<K: JobKind> {
    args: K::Args,
    states: StateMap,
    attempt: u32,
    jitter_sample: f64,
    kind: PhantomData<fn() -> K>,
}

impl<K: JobKind> RunJob<K> {
    /// Adds a state value, handed to the job when it takes `State<T>`, as
    /// [`WorkerBuilder::state`](crate::WorkerBuilder::state) does.
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.states.insert(value);
        self
    }

    /// Adds a state value the test also holds (to look at it after the run), as
    /// [`WorkerBuilder::shared_state`](crate::WorkerBuilder::shared_state) does.
    pub fn shared_state<T: Send + Sync + 'static>(mut self, value: Arc<T>) -> Self {
        self.states.insert_shared(value);
        self
    }

    /// Runs the job as its attempt `attempt` (from 1, the default, to the kind's
    /// `max_attempts`): the context says so, and a failure is classified as that attempt's would
    /// be (so the last attempt's failure is [`Decision::Dead`]).
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// The jitter sample the backoff of a retry is computed with, from 0 (the default: the
    /// longest delay of the backoff's window) to 1 (the shortest); a worker draws it at random.
    /// See [`RetryPolicy::backoff`].
    pub fn jitter_sample(mut self, sample: f64) -> Self {
        self.jitter_sample = sample;
        self
    }

    /// Runs the job and answers with the decision a worker would write.
    ///
    /// Fails, before anything runs, when the arguments cannot be enqueued, the kind is not
    /// registered, a state value it needs is missing, or the attempt is out of range.
    pub async fn run(self) -> Result<Decision, RunJobError> {
        let job = NewJob::of::<K>(&self.args)?;
        job.check()?;
        let registry = Registry::collect()?.only([K::NAME])?;
        registry.check_state(&self.states)?;
        let Some(registration) = registry.get(K::NAME).copied() else {
            return Err(RegistryError::UnknownKind(K::NAME.to_owned()).into());
        };
        let max_attempts = job.max_attempts;
        if self.attempt == 0 || self.attempt > max_attempts {
            return Err(RunJobError::AttemptOutOfRange {
                kind: K::NAME,
                attempt: self.attempt,
                max_attempts,
            });
        }
        // The rule the worker follows: attempts from the job's row, the backoff from the kind.
        let retry = RetryPolicy {
            max_attempts,
            ..registration.options.retry
        };
        // Kept until the run is over: a dropped sender reads as a shutdown.
        let (_shutdown, shutdown_requested) = watch::channel(false);
        let context = JobContext::new(
            0,
            registration.name,
            job.queue,
            self.attempt,
            max_attempts,
            job.dedupe_key,
            registration
                .options
                .lease
                .unwrap_or(WorkerConfig::default().lease),
            shutdown_requested,
        )
        .with_enqueued_at(Utc::now());
        let outcome = match (registration.handler)(context, &job.payload.to_string(), &self.states)
        {
            Ok(future) => run_caught(future, registration.options.timeout).await,
            Err(error) => invocation_failure(error),
        };
        Ok(decision_of(
            outcome,
            self.attempt,
            &retry,
            self.jitter_sample,
        ))
    }
}
