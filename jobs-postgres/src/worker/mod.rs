//! The worker: claims ready jobs of the kinds it registered with `FOR UPDATE SKIP LOCKED`, runs
//! them with per-queue concurrency and records their outcomes, renewing leases while they run
//! and rescuing expired ones; wakes on NOTIFY with polling as a fallback; shuts down gracefully.
//!
//! Pieces, one concern each: [`producer`] (claim loop of one queue), [`executor`] (one run),
//! [`maintenance`] (heartbeat and rescue), [`listener`] (LISTEN/NOTIFY), [`running`] (leases
//! held), [`config`] (settings).

mod backoff;
mod completer;
pub mod config;
mod executor;
mod listener;
mod maintenance;
mod producer;
mod running;
mod signal;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;

use jobs_core::{JobRegistration, Registry, RegistryError, StateMap};
use sqlx::PgPool;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

pub use config::{Completion, ConfigError, WorkerConfig};
use producer::QueuePlan;
use running::RunningJobs;

use crate::store::Outcome;
pub use signal::shutdown_signal;

/// Why a worker refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The registered kinds cannot run: two share a name, a state type is missing, or a kind
    /// asked for is unknown.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// A setting cannot work.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// There is nothing to run.
    #[error("the worker has no job kinds to run: define jobs with #[job] or check `.kinds(..)`")]
    NoKinds,
}

/// What the worker's tasks share.
pub(crate) struct Shared {
    pub(crate) pool: PgPool,
    pub(crate) registry: Registry,
    pub(crate) states: StateMap,
    pub(crate) config: WorkerConfig,
    pub(crate) running: RunningJobs,
    /// Where executors hand their outcomes, in batched completion.
    pub(crate) completer: Option<mpsc::UnboundedSender<Outcome>>,
    /// Set when shutdown begins: stop claiming; jobs can see it in their context.
    pub(crate) shutdown_requested: watch::Sender<bool>,
    /// Set when the grace period is over: interrupt running jobs and hand them back.
    pub(crate) interrupt: watch::Sender<bool>,
    /// Set when every job is settled: stop the heartbeat and the rescuer.
    pub(crate) stopped: watch::Sender<bool>,
}

/// Builds a [`Worker`]: state values, settings, queues and, optionally, which kinds to run.
#[must_use]
pub struct WorkerBuilder {
    pool: PgPool,
    states: StateMap,
    config: WorkerConfig,
    concurrency: BTreeMap<String, usize>,
    kinds: Option<Vec<String>>,
    registrations: Option<Vec<JobRegistration>>,
}

impl WorkerBuilder {
    /// Adds a state value, handed to jobs that take `State<T>`.
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.states.insert(value);
        self
    }

    /// Adds a state value that the application also holds: jobs taking `State<T>` see the
    /// same value.
    pub fn shared_state<T: Send + Sync + 'static>(mut self, value: Arc<T>) -> Self {
        self.states.insert_shared(value);
        self
    }

    /// Replaces the settings (see [`WorkerConfig`] for the defaults).
    pub fn config(mut self, config: WorkerConfig) -> Self {
        self.config = config;
        self
    }

    /// Runs `queue` with `concurrency` jobs at once (also for a queue no kind names by default,
    /// for jobs sent there per call).
    pub fn queue(mut self, queue: impl Into<String>, concurrency: usize) -> Self {
        self.concurrency.insert(queue.into(), concurrency);
        self
    }

    /// Runs only these kinds (by name) instead of every registered one.
    pub fn kinds<I, S>(mut self, kinds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.kinds = Some(kinds.into_iter().map(Into::into).collect());
        self
    }

    /// Runs exactly these registrations instead of those gathered from `#[job]`.
    pub fn registrations(
        mut self,
        registrations: impl IntoIterator<Item = JobRegistration>,
    ) -> Self {
        self.registrations = Some(registrations.into_iter().collect());
        self
    }

    /// Checks everything a worker needs before it runs: unique kind names, state for every
    /// kind, valid settings.
    pub fn build(self) -> Result<Worker, WorkerError> {
        self.config.validate()?;
        let registry = match self.registrations {
            Some(registrations) => Registry::from_registrations(registrations)?,
            None => Registry::collect()?,
        };
        let registry = match &self.kinds {
            Some(kinds) => registry.only(kinds.iter().map(String::as_str))?,
            None => registry,
        };
        if registry.is_empty() {
            return Err(WorkerError::NoKinds);
        }
        registry.check_state(&self.states)?;
        for (queue, concurrency) in &self.concurrency {
            if *concurrency == 0 {
                return Err(WorkerError::Config(ConfigError {
                    setting: "queue concurrency",
                    reason: if queue.is_empty() {
                        "must be at least 1"
                    } else {
                        "must be at least 1 for every queue"
                    },
                }));
            }
        }
        let mut queues = self.concurrency.clone();
        for registration in registry.iter() {
            queues
                .entry(registration.options.queue.to_string())
                .or_insert(self.config.default_concurrency);
        }
        Ok(Worker {
            pool: self.pool,
            registry,
            states: self.states,
            config: self.config,
            queues,
        })
    }
}

/// A worker ready to run; see [`Worker::builder`].
pub struct Worker {
    pool: PgPool,
    registry: Registry,
    states: StateMap,
    config: WorkerConfig,
    queues: BTreeMap<String, usize>,
}

impl Worker {
    /// Starts building a worker on `pool`. Size the pool for the concurrency plus a few
    /// connections for the heartbeat, rescue and LISTEN.
    pub fn builder(pool: PgPool) -> WorkerBuilder {
        WorkerBuilder {
            pool,
            states: StateMap::new(),
            config: WorkerConfig::default(),
            concurrency: BTreeMap::new(),
            kinds: None,
            registrations: None,
        }
    }

    /// The queues this worker runs, with their concurrency.
    pub fn queues(&self) -> &BTreeMap<String, usize> {
        &self.queues
    }

    /// Runs until `shutdown` resolves, then shuts down gracefully: stops claiming, lets running
    /// jobs finish within the grace period, then interrupts the rest and hands them back.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) {
        let handle = self.start();
        shutdown.await;
        handle.shutdown().await;
    }

    /// Starts the worker on the current tokio runtime and returns a handle to stop it.
    pub fn start(self) -> WorkerHandle {
        let (request, requested) = watch::channel(false);
        let (completer, outcomes) = match self.config.completion {
            Completion::Batched { max_batch } => {
                let (sender, receiver) = mpsc::unbounded_channel();
                (Some(sender), Some((receiver, max_batch)))
            }
            Completion::PerJob => (None, None),
        };
        let shared = Arc::new(Shared {
            pool: self.pool,
            registry: self.registry,
            states: self.states,
            config: self.config,
            running: RunningJobs::default(),
            completer,
            shutdown_requested: watch::Sender::new(false),
            interrupt: watch::Sender::new(false),
            stopped: watch::Sender::new(false),
        });
        let supervisor = tokio::spawn(supervise(shared, self.queues, requested, outcomes));
        WorkerHandle {
            request,
            supervisor,
        }
    }
}

/// A running worker.
#[must_use = "dropping the handle leaves the worker running; call `shutdown().await` to stop it"]
pub struct WorkerHandle {
    request: watch::Sender<bool>,
    supervisor: JoinHandle<()>,
}

impl WorkerHandle {
    /// Asks the worker to shut down without waiting for it.
    pub fn request_shutdown(&self) {
        self.request.send_replace(true);
    }

    /// Shuts down gracefully and waits until every job is settled.
    pub async fn shutdown(self) {
        self.request_shutdown();
        self.wait().await;
    }

    /// Waits until the worker has stopped.
    pub async fn wait(self) {
        if let Err(error) = self.supervisor.await {
            tracing::error!(%error, "the worker's supervisor task failed");
        }
    }
}

async fn supervise(
    shared: Arc<Shared>,
    queues: BTreeMap<String, usize>,
    mut requested: watch::Receiver<bool>,
    outcomes: Option<(mpsc::UnboundedReceiver<Outcome>, usize)>,
) {
    let (drain, drained) = watch::channel(false);
    let completer = outcomes.map(|(outcomes, max_batch)| {
        tokio::spawn(completer::complete(
            Arc::clone(&shared),
            outcomes,
            drained,
            max_batch,
        ))
    });
    let kinds: Vec<&'static str> = shared
        .registry
        .iter()
        .map(|registration| registration.name)
        .collect();
    let executors = TaskTracker::new();
    let mut wakers: HashMap<String, Arc<Notify>> = HashMap::new();
    let mut services = Vec::new();
    for (queue, concurrency) in queues {
        let wake = Arc::new(Notify::new());
        wakers.insert(queue.clone(), Arc::clone(&wake));
        let plan = QueuePlan {
            name: queue,
            kinds: kinds.clone(),
            concurrency,
            wake,
        };
        services.push(tokio::spawn(producer::produce(
            Arc::clone(&shared),
            plan,
            executors.clone(),
        )));
    }
    if shared.config.listen {
        services.push(tokio::spawn(listener::listen(Arc::clone(&shared), wakers)));
    }
    let heartbeat = tokio::spawn(maintenance::heartbeat(Arc::clone(&shared)));
    let rescuer = tokio::spawn(maintenance::rescuer(Arc::clone(&shared)));
    tracing::info!(kinds = ?kinds, "worker started");

    // An error means the handle is gone: treat it as a shutdown request.
    let _ = requested.wait_for(|requested| *requested).await;
    tracing::info!(
        running = shared.running.len(),
        "shutdown requested; no new jobs will be claimed"
    );
    shared.shutdown_requested.send_replace(true);
    for service in services {
        let _ = service.await;
    }
    executors.close();
    if tokio::time::timeout(shared.config.shutdown_grace, executors.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            running = shared.running.len(),
            "grace period over; interrupting running jobs and handing them back"
        );
        shared.interrupt.send_replace(true);
        executors.wait().await;
    }
    drain.send_replace(true);
    if let Some(completer) = completer {
        let _ = completer.await;
    }
    shared.stopped.send_replace(true);
    let _ = heartbeat.await;
    let _ = rescuer.await;
    tracing::info!("worker stopped");
}
