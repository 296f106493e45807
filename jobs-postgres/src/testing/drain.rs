//! Every due job of given kinds run now, in the test's task, through the worker's own claim,
//! run and outcome code: [`drain`].

use std::sync::Arc;
use std::time::Instant;

use jobs_core::{Decision, JobId, JobKind};
use sqlx::PgPool;
use tokio::sync::Semaphore;

use crate::store;
use crate::store::testing::queues_with_due_jobs;
use crate::worker::executor::execute;
use crate::worker::{Completion, Worker, WorkerBuilder, WorkerConfig, WorkerError};

/// Most runs a drain makes unless told otherwise ([`Drain::max_runs`]).
pub const DEFAULT_MAX_RUNS: usize = 100;

/// Why [`Drain::run`] stopped before every due job was run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DrainError {
    /// The kinds cannot run: a kind is not registered, a state value is missing, no kind was
    /// given (a worker would refuse to start the same way).
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// The database refused a claim.
    #[error("the drain could not claim jobs: {0}")]
    Database(#[from] sqlx::Error),
    /// Due jobs were still there after `max_runs` runs: jobs that keep enqueuing each other, or a
    /// job that snoozes without a delay. Nothing more was claimed.
    #[error("due jobs were left after {max_runs} runs: jobs that keep enqueuing each other, or snooze without a delay? (raise the bound with `max_runs`)")]
    TooManyRuns {
        /// The bound.
        max_runs: usize,
        /// What the runs did, in order.
        runs: Vec<DrainedRun>,
    },
}

/// One run of a drain: which job, which attempt, and what followed it.
#[derive(Debug, Clone, PartialEq)]
pub struct DrainedRun {
    /// The job's id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Which attempt this run was, from 1.
    pub attempt: u32,
    /// What the run decided, as written to the job's row: [`Decision::Complete`] also when the
    /// job completed itself in its own transaction.
    pub decision: Decision,
}

/// Runs every due job (ready, `run_at` now or past) of the kinds given with [`Drain::kind`],
/// including the due jobs those runs enqueue, one at a time in the test's task, until none is
/// left or [`Drain::max_runs`] is reached; answers with each run in order. Due jobs another
/// session holds locked (a worker running beside the test is claiming them) are left to it.
///
/// The runs go through the worker's own code: each job is claimed as a worker claims it (the
/// attempt counted, a lease taken), run as a worker runs it (state values, panics caught, the
/// kind's timeout, its own transaction with [`JobContextExt::transaction`]) and its outcome
/// written as a worker writes it: done, ready again after the kind's backoff (with the error
/// kept), dead, snoozed or cancelled. A retried job is due again only when its backoff is over,
/// and a drain ends as soon as no job is due: its next attempt is for a later drain.
///
/// [`JobContextExt::transaction`]: crate::JobContextExt::transaction
///
/// ```no_run
/// # mod send_receipt { // What `#[job] async fn send_receipt(order_id: i64)` generates.
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
/// # async fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use jobs_core::Decision;
/// use jobs_postgres::testing::drain;
///
/// let runs = drain(&pool)
///     .kind::<send_receipt::Job>()
///     .state(Mailer)
///     .run()
///     .await?;
/// assert!(runs.iter().all(|run| matches!(run.decision, Decision::Complete { .. })));
/// # Ok(())
/// # }
/// ```
pub fn drain(pool: &PgPool) -> Drain {
    Drain {
        worker: Worker::builder(pool.clone()).config(WorkerConfig {
            completion: Completion::PerJob,
            ..WorkerConfig::default()
        }),
        pool: pool.clone(),
        kinds: Vec::new(),
        max_runs: DEFAULT_MAX_RUNS,
    }
}

/// A drain, built by [`drain`]: kinds, state values and a bound, then [`run`](Self::run).
#[must_use = "nothing runs until `.run().await`"]
pub struct Drain {
    worker: WorkerBuilder,
    pool: PgPool,
    kinds: Vec<&'static str>,
    max_runs: usize,
}

impl Drain {
    /// Runs the due jobs of kind `K` too.
    pub fn kind<K: JobKind>(mut self) -> Self {
        if !self.kinds.contains(&K::NAME) {
            self.kinds.push(K::NAME);
        }
        self
    }

    /// Adds a state value, handed to jobs that take `State<T>`, as
    /// [`WorkerBuilder::state`] does.
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.worker = self.worker.state(value);
        self
    }

    /// Adds a state value the test also holds, as [`WorkerBuilder::shared_state`] does.
    pub fn shared_state<T: Send + Sync + 'static>(mut self, value: Arc<T>) -> Self {
        self.worker = self.worker.shared_state(value);
        self
    }

    /// Runs at most `max_runs` jobs ([`DEFAULT_MAX_RUNS`] unless told): past it, the drain
    /// fails with [`DrainError::TooManyRuns`] rather than run forever.
    pub fn max_runs(mut self, max_runs: usize) -> Self {
        self.max_runs = max_runs;
        self
    }

    /// Runs the due jobs until none is left; see [`drain`].
    pub async fn run(self) -> Result<Vec<DrainedRun>, DrainError> {
        let shared = self
            .worker
            .kinds(self.kinds.iter().copied())
            .build()?
            .into_shared();
        let leases: Vec<_> = self
            .kinds
            .iter()
            .map(|kind| shared.lease_of(kind))
            .collect();
        let slot = Arc::new(Semaphore::new(1));
        let mut runs = Vec::new();
        loop {
            let queues = queues_with_due_jobs(&self.pool, &self.kinds).await?;
            let Some(queue) = queues.first() else {
                return Ok(runs);
            };
            if runs.len() >= self.max_runs {
                return Err(DrainError::TooManyRuns {
                    max_runs: self.max_runs,
                    runs,
                });
            }
            let claimed_at = Instant::now();
            let claimed =
                store::claims::claim(&self.pool, queue, &self.kinds, &leases, 1, None).await?;
            if claimed.is_empty() {
                // The due jobs are locked by another session (a worker claiming them): not the
                // drain's to run.
                return Ok(runs);
            }
            for job in claimed {
                let permit = Arc::clone(&slot)
                    .acquire_owned()
                    .await
                    .expect("the drain's slot is never closed");
                let (id, kind) = (job.id, job.kind.clone());
                let attempt = u32::try_from(job.attempts).unwrap_or(u32::MAX);
                let lease_lost = shared.running.insert(
                    job.id,
                    job.lease_token,
                    shared.lease_of(&job.kind),
                    claimed_at,
                );
                // Nothing stops a drain's runs, so every run ends with a decision.
                if let Some(decision) = execute(Arc::clone(&shared), job, lease_lost, permit).await
                {
                    runs.push(DrainedRun {
                        id,
                        kind,
                        attempt,
                        decision,
                    });
                }
            }
        }
    }
}
