//! The worker: claims ready jobs of the kinds it registered with `FOR UPDATE SKIP LOCKED`, runs
//! them with per-queue concurrency and records their outcomes, renewing leases while they run
//! and rescuing expired ones; wakes on NOTIFY with polling as a fallback; shuts down gracefully.
//!
//! Pieces, one concern each: [`plan`] (which producers claim what, decided before anything
//! starts), [`tasks`] (starting them), [`shutdown`] (the graceful stop), [`producer`] (claim
//! loop of one queue), [`executor`] (one run), [`completer`] (outcomes written in batches), the
//! periodic services [`heartbeat`], [`rescuer`], [`presence`] (the worker's row of live workers,
//! and its throughput), [`retention`] and [`gauge_publisher`] (each on
//! [`run_periodically`](crate::periodic::run_periodically)), [`Relay`](crate::outbox::Relay)s of
//! the outbox attached with [`WorkerBuilder::relay`], [`scheduler`] (cron), [`listener`]
//! (LISTEN/NOTIFY), [`running`] (leases held), [`lease`] (a job renewing its own lease),
//! [`refusal`] (errors worth retrying, and row-by-row fallback), [`signal`] (SIGINT/SIGTERM for
//! binaries), [`reach`] (the first connection, and the cause behind a pool timeout),
//! [`connections`] (how many the worker can hold at once, against the pool's size), [`config`]
//! (settings).
//!
//! Starting: nothing runs before the database accepts a connection. Until then the worker
//! retries, having logged the cause (say "Connection refused") at the first failure; a stop
//! requested meanwhile ends it at once, and [`Worker::run_until`] and
//! [`Worker::run_until_signalled`] then return [`WorkerError::NeverReachedDatabase`]. A worker
//! whose connections default to an isolation stricter than `READ COMMITTED` stops there too
//! ([`WorkerError::StricterIsolation`]).
//!
//! Stopping: [`WorkerHandle::shutdown`] (or a first signal) stops claiming, lets running jobs
//! finish within the grace period, then interrupts the rest and hands them back as ready, the
//! interrupted attempt not counted. [`WorkerHandle::stop_now`] (or a second signal) stops at
//! once and writes nothing more: the leases of the jobs still running bring them back.

mod completer;
pub mod config;
mod connections;
pub(crate) mod executor;
mod gauge_publisher;
mod heartbeat;
mod held_connection;
mod lease;
mod listener;
mod plan;
mod presence;
mod producer;
mod reach;
mod read_ahead;
mod refusal;
mod rescuer;
mod retention;
pub(crate) mod running;
mod scheduler;
mod shutdown;
mod signal;
mod starter;
mod tasks;
mod watcher;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use jobs_core::{JobRegistration, RateLimit, Registry, RegistryError, Schedule, StateMap};
use sqlx::PgPool;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use uuid::Uuid;

pub use crate::config_error::ConfigError;
pub use config::{Completion, WorkerConfig, PRESENCE_MISSED};
pub(crate) use executor::storable_text;
use plan::KindToRun;
pub use reach::check_connection;
use running::RunningJobs;
use tasks::Tasks;

use crate::metrics::WorkerMetrics;
use crate::outbox::{Publisher, Relay, RelayTask};
use crate::store::{transactions, Outcome};
use signal::Signals;
pub use signal::{shutdown_signal, Signal, Stopped};

/// How long a stop at once waits for the worker's tasks to notice before returning anyway.
const STOP_NOW_WAIT: Duration = Duration::from_secs(1);

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
    /// A schedule cannot be used: its cron expression, time zone or interval is invalid.
    #[error("schedule of job kind `{kind}`: {error}")]
    Schedule {
        /// The kind.
        kind: String,
        /// What is wrong.
        error: jobs_core::ScheduleError,
    },
    /// A schedule names a kind this worker does not run.
    #[error("schedule `{schedule}` enqueues job kind `{kind}`, which this worker does not run: register it with #[job] (and list it in `.kinds(..)` if you use that)")]
    ScheduleOfUnknownKind {
        /// The schedule.
        schedule: String,
        /// The kind it names.
        kind: String,
    },
    /// A schedule names a kind that takes data arguments, which a schedule cannot give.
    #[error("schedule `{schedule}` enqueues job kind `{kind}`, which takes data arguments: a schedule can only enqueue kinds without them")]
    ScheduleOfKindWithArguments {
        /// The schedule.
        schedule: String,
        /// The kind it names.
        kind: String,
    },
    /// A queue given to [`WorkerBuilder::queue`] breaks the naming rules (see
    /// [`jobs_core::name`]).
    #[error("worker queue: {0}")]
    QueueName(#[source] jobs_core::NameError),
    /// A queue given to [`WorkerBuilder::queue`] is the queue of no kind this worker runs: a
    /// typo there would start an empty queue and leave the real one at the default
    /// concurrency. A queue that only jobs sent there per call use goes to
    /// [`WorkerBuilder::per_call_queue`].
    #[error("`.queue(\"{queue}\", ..)`: no job kind this worker runs uses queue `{queue}` (theirs: {}); check the name, or use `.per_call_queue(\"{queue}\", ..)` for jobs sent there per call", quoted_list(.known))]
    UnknownQueue {
        /// The queue given.
        queue: String,
        /// The queues of the kinds this worker runs, sorted.
        known: Vec<String>,
    },
    /// Two schedules share a name.
    #[error("two schedules are named `{0}`: give one another name with `Schedule::named`")]
    DuplicateSchedule(String),
    /// The worker was stopped before the database ever accepted a connection: nothing ran. The
    /// message carries the last failure's cause ("Connection refused", ...).
    #[error("stopped before the database ever accepted a connection{}", cause_of(.last_error.as_ref()))]
    NeverReachedDatabase {
        /// Why the last attempt failed; `None` when the stop came before any attempt ended.
        last_error: Option<sqlx::Error>,
    },
    /// The worker's connections default to an isolation stricter than `READ COMMITTED`
    /// (`default_transaction_isolation`, set on the database, the role or the pool's
    /// connections), as one of them said when the worker started: nothing ran. Its claims,
    /// heartbeats and outcomes are statements of their own, which would fail with a
    /// serialization error whenever another write to a row they touch committed while they
    /// ran: a heartbeat that keeps failing lets a lease expire under a running job, which then
    /// runs twice.
    #[error("the worker's connections default to `{found}` isolation (default_transaction_isolation); its claims, heartbeats and outcomes need READ COMMITTED, or they fail with serialization errors whenever another write to their rows commits while they run, and a lease can expire under a running job: set `default_transaction_isolation = 'read committed'` for the worker's role (ALTER ROLE ... SET), its database, or its pool's connections")]
    StricterIsolation {
        /// The connections' default isolation, as PostgreSQL names it.
        found: String,
    },
    /// [`WorkerBuilder::max_running`], [`WorkerBuilder::rate_limit`],
    /// [`WorkerBuilder::max_running_per_key`] or [`WorkerBuilder::rate_limit_per_key`] names a
    /// kind this worker does not run.
    #[error("`.{setting}(\"{kind}\", ..)`: this worker runs no job kind `{kind}` (it runs {})", quoted_list(.known))]
    LimitOfUnknownKind {
        /// The builder method.
        setting: &'static str,
        /// The kind given.
        kind: String,
        /// The kinds the worker runs, sorted.
        known: Vec<String>,
    },
    /// [`WorkerBuilder::max_running`] or [`WorkerBuilder::max_running_per_key`] gave a kind a
    /// limit of 0, which would never run its jobs.
    #[error("`.{setting}(\"{kind}\", 0)`: the limit must be at least 1, or no job of `{kind}` would ever run")]
    NoRunningSlots {
        /// The builder method.
        setting: &'static str,
        /// The kind given.
        kind: String,
    },
    /// A kind's lease and heartbeat, its own or the worker's, cannot work together.
    #[error("job kind `{kind}`: its heartbeat ({heartbeat:?}) must be shorter than its lease ({lease:?}), or leases run out while its jobs run")]
    HeartbeatNotShorterThanLease {
        /// The job kind.
        kind: &'static str,
        /// Its lease.
        lease: std::time::Duration,
        /// Its heartbeat.
        heartbeat: std::time::Duration,
    },
}

/// `` `a`, `b` `` from `["a", "b"]`.
fn quoted_list(names: &[String]) -> String {
    names
        .iter()
        .map(|name| format!("`{name}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `": <error>"`, or nothing.
fn cause_of(error: Option<&sqlx::Error>) -> String {
    error.map_or_else(String::new, |error| format!(": {error}"))
}

impl Shared {
    /// The lease of a job of `kind`: the kind's own, else the worker's.
    pub(crate) fn lease_of(&self, kind: &str) -> std::time::Duration {
        self.registry
            .get(kind)
            .and_then(|registration| registration.options.lease)
            .unwrap_or(self.config.lease)
    }

    /// Resolves when the worker's tasks must stop (its `stopped` signal turns true, or the
    /// worker is gone).
    pub(crate) fn stop_signal(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut stopped = self.stopped.subscribe();
        async move {
            let _ = stopped.wait_for(|stopped| *stopped).await;
        }
    }

    /// How often the heartbeat runs: the shortest heartbeat among the worker's kinds.
    pub(crate) fn heartbeat_every(&self) -> std::time::Duration {
        self.registry
            .iter()
            .filter_map(|registration| registration.options.heartbeat)
            .fold(self.config.heartbeat_interval, std::time::Duration::min)
    }
}

/// What the worker's tasks share.
pub(crate) struct Shared {
    /// The worker's id, as its row of live workers and its throughput rows hold it.
    pub(crate) id: Uuid,
    pub(crate) pool: PgPool,
    pub(crate) registry: Registry,
    pub(crate) states: StateMap,
    pub(crate) config: WorkerConfig,
    pub(crate) running: Arc<RunningJobs>,
    /// Jobs the database refused to rescue, left out of this worker's rescues for a while.
    pub(crate) rescue_set_aside: rescuer::SetAside,
    /// The per-job metrics of the kinds and queues this worker runs.
    pub(crate) metrics: WorkerMetrics,
    /// Where executors hand their outcomes, in batched completion: a bounded queue (see
    /// [`completer::queue_capacity`]); an executor waits for room with its slot held.
    pub(crate) completer: Option<mpsc::Sender<Outcome>>,
    /// Set when shutdown begins: stop claiming; jobs can see it in their context.
    pub(crate) shutdown_requested: watch::Sender<bool>,
    /// Set when the grace period is over: interrupt running jobs and hand them back.
    pub(crate) interrupt: watch::Sender<bool>,
    /// Set when every job is settled: stop the heartbeat and the rescuer.
    pub(crate) stopped: watch::Sender<bool>,
    /// Turns `true` on a stop at once: drop running jobs where they stand, write nothing more.
    pub(crate) abandoned: watch::Receiver<bool>,
    /// Counts the writes of outcomes of kinds with a running limit, and of jobs claimed ahead
    /// handed back: a producer whose claim met its kind's limit waits for it to change, since
    /// such a written outcome may have freed room under the limit; a producer that handed jobs
    /// back waits for them to be ready again before it claims.
    pub(crate) outcomes_written: watch::Sender<u64>,
}

/// Builds a [`Worker`]: state values, settings, queues and, optionally, which kinds to run.
#[must_use]
pub struct WorkerBuilder {
    pool: PgPool,
    states: StateMap,
    config: WorkerConfig,
    concurrency: BTreeMap<String, usize>,
    /// The queues of `concurrency` given with [`WorkerBuilder::per_call_queue`], which no kind
    /// needs to name.
    per_call_queues: BTreeSet<String>,
    kinds: Option<Vec<String>>,
    registrations: Option<Vec<JobRegistration>>,
    schedules: Vec<Schedule>,
    relays: Vec<RelayTask>,
    /// Limits given at run time, by kind, in place of those `#[job]` declared.
    limits: BTreeMap<String, LimitOverride>,
}

/// The limits of one kind given to the builder; `None` keeps what `#[job]` declared.
#[derive(Debug, Default, Clone, Copy)]
struct LimitOverride {
    max_running: Option<u32>,
    rate_limit: Option<RateLimit>,
    max_running_per_key: Option<u32>,
    rate_limit_per_key: Option<RateLimit>,
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

    /// Runs `queue` with `concurrency` jobs at once instead of
    /// [`WorkerConfig::default_concurrency`]. `queue` must be the queue of a kind this worker
    /// runs (`#[job(queue = ..)]`, `"default"` without one): [`build`](Self::build) refuses any
    /// other with [`WorkerError::UnknownQueue`], so that a misspelt name cannot leave the real
    /// queue at the default. For a queue only jobs sent there per call use, see
    /// [`per_call_queue`](Self::per_call_queue).
    pub fn queue(mut self, queue: impl Into<String>, concurrency: usize) -> Self {
        let queue = queue.into();
        self.per_call_queues.remove(&queue);
        self.concurrency.insert(queue, concurrency);
        self
    }

    /// Runs `queue` with `concurrency` jobs at once although no kind names it as its own: for
    /// jobs sent there per call (`my_job::builder(..).queue("slow")`). The worker claims there
    /// the kinds it runs.
    pub fn per_call_queue(mut self, queue: impl Into<String>, concurrency: usize) -> Self {
        let queue = queue.into();
        self.per_call_queues.insert(queue.clone());
        self.concurrency.insert(queue, concurrency);
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

    /// Lets at most `max_running` jobs of kind `kind` run at once across all workers, in place
    /// of its `#[job(max_running = ..)]`: for limits read from configuration. Every worker
    /// enforces the limit it was given, so give every worker of the kind the same.
    /// [`build`](Self::build) refuses a kind this worker does not run, and a limit of 0.
    pub fn max_running(mut self, kind: impl Into<String>, max_running: u32) -> Self {
        self.limits.entry(kind.into()).or_default().max_running = Some(max_running);
        self
    }

    /// Lets at most `limit.jobs()` jobs of kind `kind` start in any window of `limit.per()`
    /// across all workers, in place of its `#[job(rate_limit = ..)]`: for limits read from
    /// configuration (`"100/1s".parse::<RateLimit>()`). Every worker enforces the limit it was
    /// given, so give every worker of the kind the same. [`build`](Self::build) refuses a kind
    /// this worker does not run.
    pub fn rate_limit(mut self, kind: impl Into<String>, limit: RateLimit) -> Self {
        self.limits.entry(kind.into()).or_default().rate_limit = Some(limit);
        self
    }

    /// Lets at most `max_running` jobs of kind `kind` with the same limit key run at once across
    /// all workers, in place of its `#[job(max_running_per_key = ..)]`: for limits read from
    /// configuration. The kind must declare its key (`#[job(limit_key = "<merchant_id>")]`).
    /// Every worker enforces the limit it was given, so give every worker of the kind the same.
    /// [`build`](Self::build) refuses a kind this worker does not run, a kind without a
    /// `limit_key`, and a limit of 0.
    pub fn max_running_per_key(mut self, kind: impl Into<String>, max_running: u32) -> Self {
        self.limits
            .entry(kind.into())
            .or_default()
            .max_running_per_key = Some(max_running);
        self
    }

    /// Lets at most `limit.jobs()` jobs of kind `kind` with the same limit key start in any
    /// window of `limit.per()` across all workers, in place of its `#[job(rate_limit_per_key =
    /// ..)]`: for limits read from configuration. The kind must declare its key
    /// (`#[job(limit_key = "<merchant_id>")]`). Every worker enforces the limit it was given, so
    /// give every worker of the kind the same. [`build`](Self::build) refuses a kind this worker
    /// does not run, and a kind without a `limit_key`.
    pub fn rate_limit_per_key(mut self, kind: impl Into<String>, limit: RateLimit) -> Self {
        self.limits
            .entry(kind.into())
            .or_default()
            .rate_limit_per_key = Some(limit);
        self
    }

    /// Adds a schedule from configuration, next to those `#[job(cron = ..)]` and
    /// `#[job(every = ..)]` declare: its kind must be one this worker runs, without data
    /// arguments. Every worker that has it schedules it; each tick becomes one job.
    pub fn schedule(mut self, schedule: Schedule) -> Self {
        self.schedules.push(schedule);
        self
    }

    /// Runs an outbox relay in this worker, so that every worker process relays (several
    /// relays never publish a row twice at once). It stops claiming when shutdown begins, after
    /// finishing the batch in flight.
    pub fn relay<P: Publisher>(mut self, relay: Relay<P>) -> Self {
        self.relays.push(relay.into_task());
        self
    }

    /// Checks everything a worker needs before it runs: unique kind names, state for every
    /// kind, valid settings, queue names (each given to [`queue`](Self::queue) the queue of a
    /// kind it runs) and schedules. Logs a warning, with the numbers, when the pool holds fewer
    /// connections than the worker can use at once.
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
        let registry = with_limits(registry, &self.limits)?;
        registry.check_state(&self.states)?;
        for registration in registry.iter() {
            let lease = registration.options.lease.unwrap_or(self.config.lease);
            let heartbeat = registration
                .options
                .heartbeat
                .unwrap_or(self.config.heartbeat_interval);
            if heartbeat >= lease {
                return Err(WorkerError::HeartbeatNotShorterThanLease {
                    kind: registration.name,
                    lease,
                    heartbeat,
                });
            }
        }
        for (queue, concurrency) in &self.concurrency {
            jobs_core::check_queue_name(queue).map_err(WorkerError::QueueName)?;
            if *concurrency == 0 {
                return Err(WorkerError::Config(ConfigError {
                    setting: "queue concurrency",
                    reason: "must be at least 1 for every queue",
                }));
            }
        }
        let own_queues: BTreeSet<String> = registry
            .iter()
            .map(|registration| registration.options.queue.to_string())
            .collect();
        for queue in self.concurrency.keys() {
            if !own_queues.contains(queue) && !self.per_call_queues.contains(queue) {
                return Err(WorkerError::UnknownQueue {
                    queue: queue.clone(),
                    known: own_queues.into_iter().collect(),
                });
            }
        }
        let schedules = schedules_of(&registry, self.schedules)?;
        let mut queues = self.concurrency.clone();
        for registration in registry.iter() {
            queues
                .entry(registration.options.queue.to_string())
                .or_insert(self.config.default_concurrency);
        }
        let plans = plan::plan_producers(&kinds_to_run(&registry, &self.config), &queues);
        let need = connections::connections_needed(
            &plans,
            &self.config,
            schedules.len(),
            self.relays.len(),
        );
        if let Some(shortfall) = need.shortfall(self.pool.options().get_max_connections()) {
            tracing::warn!("{shortfall}");
        }
        Ok(Worker {
            id: Uuid::new_v4(),
            pool: self.pool,
            registry,
            states: self.states,
            config: self.config,
            queues,
            schedules,
            relays: self.relays,
        })
    }
}

/// `registry` with the limits given to the builder in place of those `#[job]` declared.
fn with_limits(
    registry: Registry,
    limits: &BTreeMap<String, LimitOverride>,
) -> Result<Registry, WorkerError> {
    if limits.is_empty() {
        return Ok(registry);
    }
    let known = || {
        let mut names: Vec<String> = registry.iter().map(|r| r.name.to_string()).collect();
        names.sort();
        names
    };
    for (kind, limit) in limits {
        if registry.get(kind).is_none() {
            let setting = if limit.max_running.is_some() {
                "max_running"
            } else if limit.rate_limit.is_some() {
                "rate_limit"
            } else if limit.max_running_per_key.is_some() {
                "max_running_per_key"
            } else {
                "rate_limit_per_key"
            };
            return Err(WorkerError::LimitOfUnknownKind {
                setting,
                kind: kind.clone(),
                known: known(),
            });
        }
        if limit.max_running == Some(0) {
            return Err(WorkerError::NoRunningSlots {
                setting: "max_running",
                kind: kind.clone(),
            });
        }
        if limit.max_running_per_key == Some(0) {
            return Err(WorkerError::NoRunningSlots {
                setting: "max_running_per_key",
                kind: kind.clone(),
            });
        }
    }
    let registrations: Vec<JobRegistration> = registry
        .iter()
        .map(|registration| {
            let mut registration = *registration;
            if let Some(limit) = limits.get(registration.name) {
                if let Some(max_running) = limit.max_running {
                    registration.options.max_running = Some(max_running);
                }
                if let Some(rate_limit) = limit.rate_limit {
                    registration.options.rate_limit = Some(rate_limit);
                }
                if let Some(per_key) = limit.max_running_per_key {
                    registration.options.max_running_per_key = Some(per_key);
                }
                if let Some(per_key) = limit.rate_limit_per_key {
                    registration.options.rate_limit_per_key = Some(per_key);
                }
            }
            registration
        })
        .collect();
    Ok(Registry::from_registrations(registrations)?)
}

/// The kinds of `registry` as the plan needs them, each with its lease (its own, else the
/// worker's).
fn kinds_to_run(registry: &Registry, config: &WorkerConfig) -> Vec<KindToRun> {
    registry
        .iter()
        .map(|registration| KindToRun {
            name: registration.name,
            queue: registration.options.queue,
            max_running: registration.options.max_running,
            rate_limit: registration.options.rate_limit,
            fair: registration.options.fair_key.is_some(),
            max_running_per_key: registration.options.max_running_per_key,
            rate_limit_per_key: registration.options.rate_limit_per_key,
            lease: registration.options.lease.unwrap_or(config.lease),
        })
        .collect()
}

/// The schedules `#[job]` declared for the registered kinds, then `extra` ones, checked.
fn schedules_of(registry: &Registry, extra: Vec<Schedule>) -> Result<Vec<Schedule>, WorkerError> {
    let mut schedules = Vec::new();
    for registration in registry.iter() {
        if let Some(options) = &registration.options.schedule {
            let schedule = Schedule::from_options(registration.name, options).map_err(|error| {
                WorkerError::Schedule {
                    kind: registration.name.to_string(),
                    error,
                }
            })?;
            schedules.push(schedule);
        }
    }
    for schedule in extra {
        let Some(registration) = registry.get(schedule.kind()) else {
            return Err(WorkerError::ScheduleOfUnknownKind {
                schedule: schedule.name().to_string(),
                kind: schedule.kind().to_string(),
            });
        };
        if registration.takes_arguments {
            return Err(WorkerError::ScheduleOfKindWithArguments {
                schedule: schedule.name().to_string(),
                kind: schedule.kind().to_string(),
            });
        }
        schedules.push(schedule);
    }
    let mut names = std::collections::HashSet::new();
    for schedule in &schedules {
        if !names.insert(schedule.name()) {
            return Err(WorkerError::DuplicateSchedule(schedule.name().to_string()));
        }
    }
    Ok(schedules)
}

/// A worker ready to run; see [`Worker::builder`].
pub struct Worker {
    id: Uuid,
    pool: PgPool,
    registry: Registry,
    states: StateMap,
    config: WorkerConfig,
    queues: BTreeMap<String, usize>,
    schedules: Vec<Schedule>,
    relays: Vec<RelayTask>,
}

impl Worker {
    /// Starts building a worker on `pool`. Size the pool for the concurrency plus a few
    /// connections for the heartbeat, rescue and LISTEN: [`build`](WorkerBuilder::build) logs a
    /// warning with the number when the pool's `max_connections` is below what the worker can
    /// use at once (sqlx's default pool holds 10; one queue at the default concurrency of 16
    /// needs 24).
    pub fn builder(pool: PgPool) -> WorkerBuilder {
        WorkerBuilder {
            pool,
            states: StateMap::new(),
            config: WorkerConfig::default(),
            concurrency: BTreeMap::new(),
            per_call_queues: BTreeSet::new(),
            kinds: None,
            registrations: None,
            schedules: Vec::new(),
            relays: Vec::new(),
            limits: BTreeMap::new(),
        }
    }

    /// The schedules this worker runs: those `#[job]` declared for its kinds, then those added
    /// with [`WorkerBuilder::schedule`].
    pub fn schedules(&self) -> &[Schedule] {
        &self.schedules
    }

    /// The queues this worker runs, with their concurrency.
    pub fn queues(&self) -> &BTreeMap<String, usize> {
        &self.queues
    }

    /// This worker's id, drawn at random when it was built: the id of its row of live workers
    /// ([`admin::live_workers`](crate::admin::live_workers)) and of its throughput rows.
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// Runs until `shutdown` resolves, then shuts down gracefully: stops claiming, lets running
    /// jobs finish within the grace period, then interrupts the rest and hands them back.
    ///
    /// An error when the database never accepted a connection before `shutdown` resolved
    /// ([`WorkerError::NeverReachedDatabase`], with the cause), or at once when the worker
    /// refused to start ([`WorkerError::StricterIsolation`]): return it from `main` so that the
    /// process exits non-zero.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) -> Result<(), WorkerError> {
        let WorkerHandle {
            id: _,
            request,
            stop_now: _stop_now,
            supervisor,
        } = self.start();
        let mut supervisor = pin!(supervisor);
        tokio::select! {
            // It ends by itself only when it refuses to start.
            joined = &mut supervisor => return supervisor_end(joined),
            () = shutdown => {}
        }
        request.send_replace(true);
        supervisor_end(supervisor.await)
    }

    /// Runs until SIGINT (ctrl-c) or SIGTERM, the ready-made wiring for binaries.
    ///
    /// The first signal shuts down gracefully, as [`WorkerHandle::shutdown`]: no more claims;
    /// running jobs get the grace period to finish; the rest are interrupted and handed back as
    /// ready at once, the interrupted attempt not counted. A second signal during that stops at
    /// once, as [`WorkerHandle::stop_now`]: nothing more is written, and the jobs still running
    /// come back when their leases expire.
    ///
    /// The signals are listened to from the call on. Exit with the answer's
    /// [`exit_code`](Stopped::exit_code), so that a forced stop does not look like a clean one
    /// (and so that a job stuck in blocking code cannot hold the process). A signal that comes
    /// before the database ever accepted a connection stops the worker at once, and the answer
    /// is [`WorkerError::NeverReachedDatabase`] with the cause; a worker that refuses to start
    /// ([`WorkerError::StricterIsolation`]) answers at once, without a signal. Return the error
    /// from `main`, so that the process exits non-zero.
    ///
    /// ```no_run
    /// # async fn run(pool: jobs_postgres::PgPool) -> Result<(), jobs_postgres::WorkerError> {
    /// let worker = jobs_postgres::Worker::builder(pool).build()?;
    /// let stopped = worker.run_until_signalled().await?;
    /// std::process::exit(stopped.exit_code());
    /// # }
    /// ```
    pub async fn run_until_signalled(self) -> Result<Stopped, WorkerError> {
        let mut signals = Signals::new();
        let handle = self.start();
        let WorkerHandle {
            id: _,
            request,
            stop_now,
            supervisor,
        } = handle;
        let mut supervisor = pin!(supervisor);
        let first = tokio::select! {
            // It ends by itself only when it refuses to start.
            joined = &mut supervisor => {
                supervisor_end(joined)?;
                let signal = signals.next().await;
                return Ok(Stopped::Gracefully { signal });
            }
            first = signals.next() => first,
        };
        tracing::info!(
            signal = %first,
            "{first} received: shutting down gracefully; send it again to stop at once"
        );
        request.send_replace(true);
        tokio::select! {
            joined = &mut supervisor => {
                supervisor_end(joined)?;
                Ok(Stopped::Gracefully { signal: first })
            }
            second = signals.next() => {
                tracing::warn!(
                    signal = %second,
                    "{second} received again: stopping at once; the jobs still running come back when their leases expire"
                );
                stop_now.send_replace(true);
                match tokio::time::timeout(STOP_NOW_WAIT, &mut supervisor).await {
                    Ok(joined) => supervisor_end(joined)?,
                    Err(_) => tracing::warn!("the worker's tasks did not stop in time; returning anyway"),
                }
                Ok(Stopped::Forced { signal: second })
            }
        }
    }

    /// Starts the worker on the current tokio runtime and returns a handle to stop it.
    pub fn start(self) -> WorkerHandle {
        let (request, requested) = watch::channel(false);
        let (stop_now, abandoned) = watch::channel(false);
        let (completer, outcomes) = match self.config.completion {
            Completion::Batched { max_batch } => {
                let (sender, receiver) = mpsc::channel(completer::queue_capacity(max_batch));
                (Some(sender), Some((receiver, max_batch)))
            }
            Completion::PerJob => (None, None),
        };
        let id = self.id;
        let (shared, queues, schedules, relays) = self.into_parts(completer, abandoned);
        let supervisor = tokio::spawn(supervise(
            shared, queues, schedules, relays, requested, outcomes,
        ));
        WorkerHandle {
            id,
            request,
            stop_now,
            supervisor,
        }
    }
}

impl Worker {
    /// What the worker's tasks share, with the queues, schedules and relays still to start;
    /// outcomes go to `completer` when there is one, and `abandoned` turning `true` is a stop at
    /// once.
    fn into_parts(
        self,
        completer: Option<mpsc::Sender<Outcome>>,
        abandoned: watch::Receiver<bool>,
    ) -> (
        Arc<Shared>,
        BTreeMap<String, usize>,
        Vec<Schedule>,
        Vec<RelayTask>,
    ) {
        crate::metrics::describe();
        let metrics = WorkerMetrics::new(
            self.registry.iter().map(|registration| registration.name),
            self.queues.keys().map(String::as_str),
            self.config.throughput,
        );
        let shared = Arc::new(Shared {
            id: self.id,
            pool: self.pool,
            registry: self.registry,
            states: self.states,
            config: self.config,
            running: Arc::default(),
            rescue_set_aside: rescuer::SetAside::default(),
            metrics,
            completer,
            shutdown_requested: watch::Sender::new(false),
            interrupt: watch::Sender::new(false),
            stopped: watch::Sender::new(false),
            abandoned,
            outcomes_written: watch::Sender::new(0),
        });
        (shared, self.queues, self.schedules, self.relays)
    }

    /// What the worker's tasks would share, for running claimed jobs one by one in the caller's
    /// task ([`executor::execute`]) with nothing started: outcomes are written as each run
    /// ends, and nothing stops the runs. For the test helpers' drain.
    #[cfg(feature = "testing")]
    pub(crate) fn into_shared(self) -> Arc<Shared> {
        // No stop at once can come: its sender is gone.
        let (_never_abandoned, abandoned) = watch::channel(false);
        self.into_parts(None, abandoned).0
    }
}

/// A running worker.
#[must_use = "dropping the handle starts a graceful shutdown without waiting for it; keep it and call `shutdown().await`"]
pub struct WorkerHandle {
    id: Uuid,
    request: watch::Sender<bool>,
    stop_now: watch::Sender<bool>,
    supervisor: JoinHandle<Result<(), WorkerError>>,
}

impl WorkerHandle {
    /// The worker's id (see [`Worker::id`]).
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// Asks the worker to shut down without waiting for it.
    pub fn request_shutdown(&self) {
        self.request.send_replace(true);
    }

    /// Shuts down gracefully and waits until every job is settled.
    ///
    /// An error when the worker stopped before the database ever accepted a connection
    /// ([`WorkerError::NeverReachedDatabase`], with the cause) or refused to start
    /// ([`WorkerError::StricterIsolation`]), as [`WorkerHandle::wait`].
    pub async fn shutdown(self) -> Result<(), WorkerError> {
        self.request_shutdown();
        self.wait().await
    }

    /// Stops at once, what a second ctrl-c does: running jobs are dropped where they stand
    /// (their tasks aborted), no outcome, hand-back or heartbeat is written any more, and the
    /// jobs still running come back when their leases expire (any worker's rescue makes them
    /// ready, the attempt counted). Returns once the worker's tasks have stopped, with the same
    /// answer as [`WorkerHandle::wait`].
    pub async fn stop_now(self) -> Result<(), WorkerError> {
        self.request_shutdown();
        self.stop_now.send_replace(true);
        self.wait().await
    }

    /// Waits until the worker has stopped.
    ///
    /// An error when it stopped before the database ever accepted a connection
    /// ([`WorkerError::NeverReachedDatabase`], with the cause), or when it refused to start
    /// ([`WorkerError::StricterIsolation`], which ends it without a stop being asked for):
    /// return it from `main` so that the process exits non-zero.
    pub async fn wait(self) -> Result<(), WorkerError> {
        supervisor_end(self.supervisor.await)
    }
}

/// How the supervisor ended; a panic in it is logged (nothing more can be said).
fn supervisor_end(
    joined: Result<Result<(), WorkerError>, tokio::task::JoinError>,
) -> Result<(), WorkerError> {
    joined.unwrap_or_else(|error| {
        tracing::error!(%error, "the worker's supervisor task failed");
        Ok(())
    })
}

/// Refuses connections of `pool` whose default isolation is stricter than `READ COMMITTED`
/// ([`WorkerError::StricterIsolation`]), as one connection says it. When it cannot be read (the
/// database lost just after it was reached: the read waits up to the pool's acquire timeout),
/// the worker starts, having logged why: its statements report their own errors.
async fn isolation_checked(pool: &PgPool) -> Result<(), WorkerError> {
    match transactions::default_isolation(pool).await {
        Ok(found) if !transactions::reads_each_commit(&found) => {
            Err(WorkerError::StricterIsolation { found })
        }
        Ok(_) => Ok(()),
        Err(error) => {
            tracing::warn!(%error, "could not read the connections' default isolation; starting anyway");
            Ok(())
        }
    }
}

async fn supervise(
    shared: Arc<Shared>,
    queues: BTreeMap<String, usize>,
    schedules: Vec<Schedule>,
    relays: Vec<RelayTask>,
    mut requested: watch::Receiver<bool>,
    outcomes: Option<(mpsc::Receiver<Outcome>, usize)>,
) -> Result<(), WorkerError> {
    // Nothing starts before the database answers: the cause of a failure is logged once, at
    // the first one, instead of every task waiting out the pool's timeout and reporting it as
    // `PoolTimedOut`; and a stop meanwhile has nothing to wait for.
    let reached = reach::first_connection(
        &shared.pool,
        shared.config.max_reconnect_delay,
        &mut requested,
    )
    .await;
    if let Err(last_error) = reached {
        let error = WorkerError::NeverReachedDatabase { last_error };
        tracing::error!(%error, "worker stopped");
        return Err(error);
    }
    if let Err(error) = isolation_checked(&shared.pool).await {
        tracing::error!(%error, "worker stopped");
        return Err(error);
    }
    let kinds = kinds_to_run(&shared.registry, &shared.config);
    let plans = plan::plan_producers(&kinds, &queues);
    let presence = presence::presence_of(shared.id, &queues, &kinds);
    let tasks = Tasks::spawn(&shared, plans, schedules, relays, outcomes, presence);
    tracing::info!(
        worker.id = %shared.id,
        kinds = ?kinds.iter().map(|kind| kind.name).collect::<Vec<_>>(),
        "worker started"
    );
    let every_task = tasks.abort_handles();
    let orderly = async {
        // An error means the handle is gone: treat it as a shutdown request.
        let _ = requested.wait_for(|requested| *requested).await;
        tasks.shut_down(&shared).await;
    };
    let mut abandoned = shared.abandoned.clone();
    tokio::select! {
        () = orderly => tracing::info!("worker stopped"),
        Ok(_) = abandoned.wait_for(|abandoned| *abandoned) => {
            shared.shutdown_requested.send_replace(true);
            shared.stopped.send_replace(true);
            for task in every_task {
                task.abort();
            }
            tracing::warn!(
                running = shared.running.len(),
                "worker stopped at once; the jobs it was running come back when their leases expire"
            );
        }
    }
    Ok(())
}
