//! Chaos tests of `jobs`: real worker processes (the `chaos-worker` binary of this crate) are
//! SIGKILLed, SIGSTOPped, signalled to shut down, aborted by their own jobs, cut off from
//! PostgreSQL or starved of connections, and the tests in `tests/chaos/` check that every job
//! still ends done (or dead, loudly) and print what the fault cost.
//!
//! This library holds what the binary and the tests share: the job kinds, the table where jobs
//! record their runs, and the worker's settings as command-line arguments.

#![warn(missing_docs)]

use std::time::Duration;

use jobs::postgres::JobContextExt;
use jobs::{job, Batch, JobContext, JobError, JobResult, State, WorkerConfig};
use sqlx::PgPool;

/// The queue every chaos job goes to.
pub const QUEUE: &str = "chaos";

/// The `application_name` of the worker's connections, so that tests can find them in
/// `pg_stat_activity` (to terminate them) without touching their own.
pub const APPLICATION_NAME: &str = "jobs-chaos-worker";

/// The kinds the chaos worker runs.
pub const KINDS: [&str; 11] = [
    "chaos_job",
    "abort_process",
    "stale_then_fresh",
    "watches_its_lease",
    "long_job",
    "effect_once",
    "chaos_tick",
    "rate_limited_job",
    "running_limited_job",
    "per_key_limited_job",
    BATCH_CALLBACK,
];

/// The rate limit of [`rate_limited_job`].
pub const RATE_LIMIT: &str = "25/250ms";

/// The running limit of [`running_limited_job`].
pub const MAX_RUNNING: i64 = 2;

/// The running limit per merchant of [`per_key_limited_job`].
pub const MAX_RUNNING_PER_KEY: i64 = 2;

/// The kind of the batch callback [`batch_ended`], which a worker started with
/// `--batch-callbacks=0` does not run.
pub const BATCH_CALLBACK: &str = "batch_ended";

/// Creates the tables where chaos jobs record what they do: `runs`, one row per run (which job,
/// which attempt, which process), `notices`, one row per job that saw its lease lost, and
/// `effects`, the rows `effect_once` writes through transactional completion (deliberately
/// without a unique constraint, so that a duplicate would show), and `callbacks`, one row per
/// run of a batch's callback `batch_ended`, with the counts it read.
pub const SCHEMA: &str = "
CREATE TABLE runs (
    job_id     bigint      NOT NULL,
    attempt    integer     NOT NULL,
    pid        integer     NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX runs_job ON runs (job_id);
CREATE INDEX runs_pid ON runs (pid);
CREATE TABLE notices (
    job_id   bigint      NOT NULL,
    attempt  integer     NOT NULL,
    pid      integer     NOT NULL,
    noticed  text        NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE effects (
    job_id  bigint  NOT NULL,
    attempt integer NOT NULL,
    pid     integer NOT NULL
);
CREATE TABLE callbacks (
    job_id     bigint      NOT NULL,
    attempt    integer     NOT NULL,
    pid        integer     NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    pending    bigint      NOT NULL,
    done       bigint      NOT NULL,
    dead       bigint      NOT NULL,
    cancelled  bigint      NOT NULL
)";

/// Defines a chaos job that rides out faults: queue `chaos`, 25 attempts, backoff from 20 ms up
/// to 200 ms. A database outage fails its statements, which must not push it into long backoffs
/// or to dead.
macro_rules! patient_job {
    ($(#[$attribute:meta])* pub async fn $($job:tt)*) => {
        $(#[$attribute])*
        #[job(queue = "chaos", max_attempts = 25, backoff_base = "20ms", backoff_max = "200ms")]
        pub async fn $($job)*
    };
}

/// Records this run in `runs`.
async fn record_run(pool: &PgPool, ctx: &JobContext) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO runs (job_id, attempt, pid) VALUES ($1, $2, $3)")
        .bind(ctx.id())
        .bind(i32::try_from(ctx.attempt()).unwrap_or(i32::MAX))
        .bind(process_id())
        .execute(pool)
        .await
        .map(drop)
}

/// This process's id, as stored in `runs.pid`.
pub fn process_id() -> i32 {
    i32::try_from(std::process::id()).unwrap_or(i32::MAX)
}

patient_job! {
    /// The ordinary job of the drains: records its run, then works for `sleep_ms`.
    pub async fn chaos_job(ctx: JobContext, pool: State<PgPool>, sleep_ms: u64) -> JobResult {
        record_run(&pool, &ctx).await?;
        tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
        Ok(())
    }
}

/// A job that kills its worker process on every attempt (`std::process::abort`), after recording
/// the run: it must end dead after its attempts, through lease expiry, not loop.
#[job(queue = "chaos", max_attempts = 3)]
pub async fn abort_process(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    record_run(&pool, &ctx).await?;
    std::process::abort()
}

patient_job! {
    /// On its first attempt, works for `sleep_ms` then fails permanently (the job would go dead);
    /// on later attempts, completes at once. A first run that outlived its lease must not get to
    /// write its verdict: the job must end done, as the later run decided.
    pub async fn stale_then_fresh(
        ctx: JobContext,
        pool: State<PgPool>,
        sleep_ms: u64,
    ) -> JobResult {
        record_run(&pool, &ctx).await?;
        if ctx.attempt() == 1 {
            tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
            return Err(JobError::permanent(
                "verdict of the first run, which outlived its lease: must never be recorded",
            ));
        }
        Ok(())
    }
}

patient_job! {
    /// On its first attempt, waits (up to a minute) until the worker says its lease is lost,
    /// records that in `notices` and stops; later attempts complete at once.
    pub async fn watches_its_lease(ctx: JobContext, pool: State<PgPool>) -> JobResult {
        record_run(&pool, &ctx).await?;
        if ctx.attempt() > 1 {
            return Ok(());
        }
        tokio::select! {
            () = ctx.lease_lost() => {}
            () = tokio::time::sleep(Duration::from_secs(60)) => return Ok(()),
        }
        let renewal = match ctx.renew_lease().await {
            Ok(()) => String::from("renewed"),
            Err(error) => error.to_string(),
        };
        sqlx::query("INSERT INTO notices (job_id, attempt, pid, noticed) VALUES ($1, $2, $3, $4)")
            .bind(ctx.id())
            .bind(i32::try_from(ctx.attempt()).unwrap_or(i32::MAX))
            .bind(process_id())
            .bind(renewal)
            .execute(&*pool)
            .await?;
        Err(JobError::transient("stopped: the lease was lost"))
    }
}

patient_job! {
    /// Records its run, then works for `sleep_ms` regardless of shutdown (only on the first
    /// attempt when `only_first_attempt`), renewing its own lease every second on the way.
    pub async fn long_job(
        ctx: JobContext,
        pool: State<PgPool>,
        sleep_ms: u64,
        only_first_attempt: bool,
    ) -> JobResult {
        record_run(&pool, &ctx).await?;
        if only_first_attempt && ctx.attempt() > 1 {
            return Ok(());
        }
        let until = tokio::time::Instant::now() + Duration::from_millis(sleep_ms);
        while tokio::time::Instant::now() < until {
            let next_renewal = tokio::time::Instant::now() + Duration::from_secs(1);
            tokio::time::sleep_until(until.min(next_renewal)).await;
            if let Err(jobs::LeaseError::Lost) = ctx.renew_lease().await {
                return Err(JobError::transient("lease lost"));
            }
        }
        Ok(())
    }
}

patient_job! {
    /// Records its run, then inserts one row into `effects` and completes itself in the same
    /// transaction, working for `sleep_ms` in between: however often it runs, one row per job.
    pub async fn effect_once(ctx: JobContext, pool: State<PgPool>, sleep_ms: u64) -> JobResult {
        record_run(&pool, &ctx).await?;
        let mut tx = ctx.transaction().await?;
        sqlx::query("INSERT INTO effects (job_id, attempt, pid) VALUES ($1, $2, $3)")
            .bind(ctx.id())
            .bind(i32::try_from(ctx.attempt()).unwrap_or(i32::MAX))
            .bind(process_id())
            .execute(&mut *tx)
            .await?;
        tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
        tx.complete().await?;
        Ok(())
    }
}

patient_job! {
    /// A batch's callback: reads how its batch ended and records this run, with its attempt
    /// and those counts, in `callbacks` (not in `runs`, which counts the members' runs).
    pub async fn batch_ended(ctx: JobContext, pool: State<PgPool>) -> JobResult {
        let outcome = Batch::outcome(&ctx).await.map_err(JobError::transient)?;
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        sqlx::query(
            "INSERT INTO callbacks (job_id, attempt, pid, pending, done, dead, cancelled)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(ctx.id())
        .bind(i32::try_from(ctx.attempt()).unwrap_or(i32::MAX))
        .bind(process_id())
        .bind(count(outcome.pending))
        .bind(count(outcome.done))
        .bind(count(outcome.dead))
        .bind(count(outcome.cancelled))
        .execute(&*pool)
        .await?;
        Ok(())
    }
}

/// Records its run, with at most 25 started in any 250 ms across all workers
/// ([`RATE_LIMIT`]).
#[job(queue = "chaos", rate_limit = "25/250ms")]
pub async fn rate_limited_job(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    record_run(&pool, &ctx).await?;
    Ok(())
}

/// Records its run, then works for `sleep_ms`, with at most two running at once across all
/// workers ([`MAX_RUNNING`]).
#[job(queue = "chaos", max_running = 2)]
pub async fn running_limited_job(ctx: JobContext, pool: State<PgPool>, sleep_ms: u64) -> JobResult {
    record_run(&pool, &ctx).await?;
    tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
    Ok(())
}

/// Records its run, then works for `sleep_ms`, with at most two of the same merchant running at
/// once across all workers ([`MAX_RUNNING_PER_KEY`]).
#[job(queue = "chaos", limit_key = "<merchant>", max_running_per_key = 2)]
pub async fn per_key_limited_job(
    ctx: JobContext,
    pool: State<PgPool>,
    merchant: String,
    sleep_ms: u64,
) -> JobResult {
    let _ = merchant;
    record_run(&pool, &ctx).await?;
    tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
    Ok(())
}

/// Records its run: the job of the every-tick schedule (`--schedule-every-ms`).
#[job(queue = "chaos", max_attempts = 3)]
pub async fn chaos_tick(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    record_run(&pool, &ctx).await?;
    Ok(())
}

/// The chaos worker's settings, passed on its command line as `--name=value` pairs.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerSettings {
    /// The database to work on (`--database-url`, required).
    pub database_url: String,
    /// Lease of a claim (`--lease-ms`).
    pub lease: Duration,
    /// Heartbeat interval (`--heartbeat-ms`).
    pub heartbeat: Duration,
    /// Rescue interval (`--rescue-ms`).
    pub rescue: Duration,
    /// Poll interval (`--poll-ms`).
    pub poll: Duration,
    /// Jobs run at once (`--concurrency`).
    pub concurrency: usize,
    /// Grace period of a graceful shutdown (`--grace-ms`).
    pub grace: Duration,
    /// Longest backoff between attempts to reach the database (`--reconnect-ms`).
    pub max_reconnect_delay: Duration,
    /// Connections in the pool (`--pool`).
    pub pool_size: u32,
    /// How long a statement waits for a pooled connection (`--acquire-timeout-ms`).
    pub acquire_timeout: Duration,
    /// When set, schedules `chaos_tick` at this interval (`--schedule-every-ms`, 0 for none).
    pub schedule_every: Option<Duration>,
    /// Whether the worker runs batch callbacks, [`BATCH_CALLBACK`] (`--batch-callbacks`, 1 or
    /// 0): a worker killed to test batches runs only their members.
    pub batch_callbacks: bool,
}

/// A command line the chaos worker cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// An argument is not `--name=value`, or the name is unknown.
    #[error("unknown argument `{0}`: expected --name=value with a name from --database-url, --lease-ms, --heartbeat-ms, --rescue-ms, --poll-ms, --concurrency, --grace-ms, --reconnect-ms, --pool, --acquire-timeout-ms, --schedule-every-ms, --batch-callbacks")]
    Unknown(String),
    /// A value is not a number.
    #[error("`{name}` needs a whole number, not `{value}`")]
    NotANumber {
        /// The argument.
        name: String,
        /// Its value.
        value: String,
    },
    /// `--database-url` is missing.
    #[error("--database-url=postgres://... is required")]
    NoDatabase,
}

impl WorkerSettings {
    /// Settings for fast recovery: a 2 s lease renewed every 500 ms, rescue every 250 ms, polls
    /// every 100 ms, reconnection backoff up to 1 s, 16 jobs at once, a 30 s grace period.
    pub fn fast(database_url: impl Into<String>) -> Self {
        Self {
            database_url: database_url.into(),
            lease: Duration::from_secs(2),
            heartbeat: Duration::from_millis(500),
            rescue: Duration::from_millis(250),
            poll: Duration::from_millis(100),
            concurrency: 16,
            grace: Duration::from_secs(30),
            max_reconnect_delay: Duration::from_secs(1),
            pool_size: 24,
            acquire_timeout: Duration::from_secs(5),
            schedule_every: None,
            batch_callbacks: true,
        }
    }

    /// The kinds these settings run: [`KINDS`], without [`BATCH_CALLBACK`] when
    /// `batch_callbacks` is off.
    pub fn kinds(&self) -> Vec<&'static str> {
        KINDS
            .into_iter()
            .filter(|kind| self.batch_callbacks || *kind != BATCH_CALLBACK)
            .collect()
    }

    /// The worker configuration these settings describe.
    pub fn worker_config(&self) -> WorkerConfig {
        WorkerConfig {
            lease: self.lease,
            heartbeat_interval: self.heartbeat,
            rescue_interval: self.rescue,
            poll_interval: self.poll,
            default_concurrency: self.concurrency,
            shutdown_grace: self.grace,
            max_reconnect_delay: self.max_reconnect_delay,
            ..WorkerConfig::default()
        }
    }

    /// The settings as command-line arguments.
    pub fn to_args(&self) -> Vec<String> {
        let ms = |duration: Duration| duration.as_millis().to_string();
        vec![
            format!("--database-url={}", self.database_url),
            format!("--lease-ms={}", ms(self.lease)),
            format!("--heartbeat-ms={}", ms(self.heartbeat)),
            format!("--rescue-ms={}", ms(self.rescue)),
            format!("--poll-ms={}", ms(self.poll)),
            format!("--concurrency={}", self.concurrency),
            format!("--grace-ms={}", ms(self.grace)),
            format!("--reconnect-ms={}", ms(self.max_reconnect_delay)),
            format!("--pool={}", self.pool_size),
            format!("--acquire-timeout-ms={}", ms(self.acquire_timeout)),
            format!(
                "--schedule-every-ms={}",
                self.schedule_every.map_or(0, |every| every.as_millis())
            ),
            format!("--batch-callbacks={}", u8::from(self.batch_callbacks)),
        ]
    }

    /// Reads settings from command-line arguments (without the program name); what is not
    /// given keeps the value of [`fast`](Self::fast).
    pub fn from_args(args: impl IntoIterator<Item = String>) -> Result<Self, SettingsError> {
        let mut settings = Self::fast(String::new());
        for arg in args {
            let Some((name, value)) = arg.strip_prefix("--").and_then(|arg| arg.split_once('='))
            else {
                return Err(SettingsError::Unknown(arg));
            };
            let number = || {
                value.parse::<u64>().map_err(|_| SettingsError::NotANumber {
                    name: name.to_string(),
                    value: value.to_string(),
                })
            };
            let millis = || number().map(Duration::from_millis);
            match name {
                "database-url" => settings.database_url = value.to_string(),
                "lease-ms" => settings.lease = millis()?,
                "heartbeat-ms" => settings.heartbeat = millis()?,
                "rescue-ms" => settings.rescue = millis()?,
                "poll-ms" => settings.poll = millis()?,
                "concurrency" => {
                    settings.concurrency = usize::try_from(number()?).unwrap_or(usize::MAX)
                }
                "grace-ms" => settings.grace = millis()?,
                "reconnect-ms" => settings.max_reconnect_delay = millis()?,
                "pool" => settings.pool_size = u32::try_from(number()?).unwrap_or(u32::MAX),
                "acquire-timeout-ms" => settings.acquire_timeout = millis()?,
                "schedule-every-ms" => {
                    settings.schedule_every = Some(millis()?).filter(|every| !every.is_zero())
                }
                "batch-callbacks" => settings.batch_callbacks = number()? != 0,
                _ => return Err(SettingsError::Unknown(arg)),
            }
        }
        if settings.database_url.is_empty() {
            return Err(SettingsError::NoDatabase);
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_survive_the_command_line() {
        let mut settings = WorkerSettings::fast("postgres://u@h:1/db");
        settings.grace = Duration::from_millis(1500);
        settings.concurrency = 3;
        settings.schedule_every = Some(Duration::from_secs(1));
        settings.batch_callbacks = false;
        assert_eq!(WorkerSettings::from_args(settings.to_args()), Ok(settings));
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        let url = String::from("--database-url=x");
        assert_eq!(
            WorkerSettings::from_args([url.clone(), "--lease-ms=soon".into()]),
            Err(SettingsError::NotANumber {
                name: "lease-ms".into(),
                value: "soon".into()
            })
        );
        assert!(matches!(
            WorkerSettings::from_args([url, "--colour=red".into()]),
            Err(SettingsError::Unknown(_))
        ));
        assert_eq!(
            WorkerSettings::from_args(Vec::new()),
            Err(SettingsError::NoDatabase)
        );
    }
}
