//! What the chaos tests share: a migrated database with the `runs` table, worker processes to
//! start, signal and kill, polling with a deadline, and the figures each test prints.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::future::Future;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use jobs::postgres::testing::TestDatabase;
use jobs::{EnqueueError, Enqueued, JobId};
use jobs_chaos::{chaos_job, WorkerSettings};
use sqlx::PgPool;
use tempfile::TempDir;
use tokio::sync::{Mutex, MutexGuard};

/// The chaos tests run one at a time: each measures recovery times, and the machine may have
/// two cores only.
static SERIAL: Mutex<()> = Mutex::const_new(());

/// Waits for the other chaos tests to finish.
pub async fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().await
}

/// Waits for the other chaos tests to finish, then creates a fresh database on the shared
/// server. Keep the guard first in the test (`let (_serial, db) = ...`): dropped last, it lets
/// the next test start only once this one's workers are gone.
pub async fn alone_on_shared_server() -> (MutexGuard<'static, ()>, ChaosDb) {
    let serial = serial().await;
    (serial, ChaosDb::on_shared_server().await)
}

/// A fresh, migrated database with the chaos tables, on the shared server or on a cluster.
pub struct ChaosDb {
    pub pool: PgPool,
    pub database: TestDatabase,
}

impl ChaosDb {
    /// On the shared test server (for faults that do not touch the server itself).
    pub async fn on_shared_server() -> Self {
        let database = TestDatabase::create().await.expect("create test database");
        Self::prepare(database).await
    }

    /// On the server at `server_url`, such as a throwaway cluster.
    pub async fn on(server_url: &str) -> Self {
        let database = TestDatabase::create_on(server_url)
            .await
            .expect("create test database");
        Self::prepare(database).await
    }

    async fn prepare(database: TestDatabase) -> Self {
        let pool = database
            .pool(4)
            .await
            .expect("connect to the test database");
        jobs::migrate(&pool).await.expect("migrate");
        sqlx::raw_sql(jobs_chaos::SCHEMA)
            .execute(&pool)
            .await
            .expect("create the chaos tables");
        Self { pool, database }
    }

    /// Worker settings for this database, with fast recovery.
    pub fn settings(&self) -> WorkerSettings {
        WorkerSettings::fast(self.database.url())
    }

    /// Starts a chaos worker named `name` on this database, with [`settings`](Self::settings).
    pub fn spawn_worker(&self, name: &str) -> Worker {
        Worker::spawn(name, &self.settings())
    }

    /// Enqueues `count` `chaos_job`s, each working `sleep_ms`; returns their ids.
    pub async fn enqueue_chaos_jobs(&self, count: usize, sleep_ms: u64) -> Vec<JobId> {
        ids_of(
            chaos_job::enqueue_many(&self.pool, (0..count).map(|_| chaos_job::Args { sleep_ms }))
                .await,
        )
    }

    /// The value of a query returning one number.
    pub async fn scalar_i64(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|error| panic!("{sql}: {error}"))
    }

    /// Jobs in `state`.
    pub async fn count_in(&self, state: &str) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM jobs_queue WHERE state = $1")
            .bind(state)
            .fetch_one(&self.pool)
            .await
            .expect("count jobs")
    }

    /// The state of job `id`.
    pub async fn state_of(&self, id: JobId) -> String {
        sqlx::query_scalar("SELECT state FROM jobs_queue WHERE id = $1")
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|error| panic!("the state of job {id}: {error}"))
    }

    /// Failed attempts recorded for another reason than an expired lease: those a fault made
    /// fail (an outage, a cut connection).
    pub async fn attempts_failed_otherwise(&self) -> i64 {
        self.scalar_i64(
            "SELECT count(*) FROM jobs_queue, jsonb_array_elements(errors) AS e
             WHERE e->>'kind' <> 'lease_expired'",
        )
        .await
    }

    /// Waits (up to 20 s) until `count` runs are recorded, by any process.
    pub async fn wait_for_runs(&self, count: i64, workers: &[&Worker]) {
        wait_until(
            &format!("all {count} jobs to run"),
            Duration::from_secs(20),
            workers,
            || async { self.scalar_i64("SELECT count(*) FROM runs").await == count },
        )
        .await;
    }

    /// Runs recorded by the process `pid`.
    pub async fn runs_by(&self, pid: u32) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM runs WHERE pid = $1")
            .bind(i32::try_from(pid).unwrap_or(i32::MAX))
            .fetch_one(&self.pool)
            .await
            .expect("count runs")
    }

    /// The ids of jobs running now (by the database's view: leased).
    pub async fn running_ids(&self) -> BTreeSet<JobId> {
        sqlx::query_scalar::<_, JobId>("SELECT id FROM jobs_queue WHERE state = 'running'")
            .fetch_all(&self.pool)
            .await
            .expect("running jobs")
            .into_iter()
            .collect()
    }

    /// The ids of jobs run at least once by process `pid`.
    pub async fn run_by(&self, pid: u32) -> BTreeSet<JobId> {
        sqlx::query_scalar::<_, JobId>("SELECT DISTINCT job_id FROM runs WHERE pid = $1")
            .bind(i32::try_from(pid).unwrap_or(i32::MAX))
            .fetch_all(&self.pool)
            .await
            .expect("runs of a process")
            .into_iter()
            .collect()
    }

    /// Jobs run more than once, with how often they ran.
    pub async fn run_more_than_once(&self) -> BTreeMap<JobId, i64> {
        sqlx::query_as::<_, (JobId, i64)>(
            "SELECT job_id, count(*) FROM runs GROUP BY job_id HAVING count(*) > 1",
        )
        .fetch_all(&self.pool)
        .await
        .expect("runs per job")
        .into_iter()
        .collect()
    }

    /// Jobs of `ids` that are not done, or done without any recorded run: lost.
    pub async fn lost(&self, ids: &[JobId]) -> Vec<JobId> {
        sqlx::query_scalar(
            "SELECT j.id FROM unnest($1::bigint[]) AS wanted(id)
             LEFT JOIN jobs_queue j ON j.id = wanted.id
             WHERE j.id IS NULL OR j.state <> 'done'
                OR NOT EXISTS (SELECT 1 FROM runs r WHERE r.job_id = wanted.id)
             ORDER BY 1",
        )
        .bind(ids)
        .fetch_all(&self.pool)
        .await
        .expect("lost jobs")
    }

    /// Jobs whose error history records an expired lease (rescued at least once).
    pub async fn rescued(&self) -> i64 {
        self.scalar_i64(
            "SELECT count(*) FROM jobs_queue
             WHERE errors @> '[{\"kind\": \"lease_expired\"}]'::jsonb",
        )
        .await
    }

    /// Seconds on the database's clock since `epoch` (seconds).
    pub async fn seconds_since(&self, epoch: f64) -> f64 {
        sqlx::query_scalar("SELECT extract(epoch FROM clock_timestamp())::float8 - $1")
            .bind(epoch)
            .fetch_one(&self.pool)
            .await
            .expect("clock")
    }

    /// The database's clock, as epoch seconds.
    pub async fn now(&self) -> f64 {
        self.seconds_since(0.0).await
    }

    /// Waits until every job of `ids` is done; panics after `limit` naming how many are not.
    pub async fn wait_all_done(&self, ids: &[JobId], limit: Duration, workers: &[&Worker]) {
        let what = format!("all {} jobs to be done", ids.len());
        wait_until(&what, limit, workers, || async {
            let done: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM jobs_queue WHERE id = ANY($1) AND state = 'done'",
            )
            .bind(ids)
            .fetch_one(&self.pool)
            .await
            .unwrap_or(-1);
            done == i64::try_from(ids.len()).unwrap_or(i64::MAX)
        })
        .await;
    }
}

/// The ids of jobs enqueued in bulk; panics if enqueueing failed.
pub fn ids_of(enqueued: Result<Vec<Enqueued>, EnqueueError>) -> Vec<JobId> {
    enqueued
        .expect("enqueue")
        .into_iter()
        .map(|enqueued| enqueued.id())
        .collect()
}

/// The kinds of the errors in a job's error history (`jobs_queue.errors`), oldest first.
pub fn error_kinds(errors: &serde_json::Value) -> Vec<&str> {
    errors
        .as_array()
        .expect("errors array")
        .iter()
        .filter_map(|error| error["kind"].as_str())
        .collect()
}

/// One SIGKILL of a victim worker: when, which process, and which jobs were running (leased)
/// just after it.
pub struct Kill {
    pub at_epoch: f64,
    pub pid: u32,
    pub running: BTreeSet<JobId>,
}

/// Starts a steady worker and a victim (with [`ChaosDb::settings`]), then `kills` times: waits
/// until the victim has run `runs_before_kill` jobs, SIGKILLs it mid-work and starts the next
/// victim. Returns the steady worker, the last victim (alive) and what each kill left running.
pub async fn kill_victims(
    db: &ChaosDb,
    kills: usize,
    runs_before_kill: i64,
) -> (Worker, Worker, Vec<Kill>) {
    let settings = &db.settings();
    let steady = Worker::spawn("steady", settings);
    let mut victim = Worker::spawn("victim-1", settings);
    let mut done = Vec::new();
    for kill in 1..=kills {
        let pid = victim.pid();
        wait_until(
            &format!("victim-{kill} to run {runs_before_kill} jobs"),
            Duration::from_secs(30),
            &[&steady, &victim],
            || async { db.runs_by(pid).await >= runs_before_kill },
        )
        .await;
        victim.kill();
        let at_epoch = db.now().await;
        // The victim is dead: what it held stays `running` until the lease expires.
        done.push(Kill {
            at_epoch,
            pid,
            running: db.running_ids().await,
        });
        victim = Worker::spawn(&format!("victim-{}", kill + 1), settings);
    }
    (steady, victim, done)
}

/// Polls `condition` until it holds; after `limit`, panics naming what it waited for, with the
/// tails of the workers' logs.
pub async fn wait_until<F, Fut>(what: &str, limit: Duration, workers: &[&Worker], condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    jobs_testkit::wait_until_or(what, limit, condition, || {
        workers
            .iter()
            .map(|worker| format!("--- {} ---\n{}", worker.name, worker.log_tail(40)))
            .collect::<Vec<_>>()
            .join("\n")
    })
    .await;
}

/// A chaos worker process, killed when dropped.
pub struct Worker {
    pub name: String,
    child: Child,
    log: PathBuf,
    exit: Option<ExitStatus>,
    _dir: TempDir,
}

impl Worker {
    /// Starts the chaos worker with `settings`, its output going to a log file.
    pub fn spawn(name: &str, settings: &WorkerSettings) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let log = dir.path().join(format!("{name}.log"));
        let out = File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_chaos-worker"))
            .args(settings.to_args())
            .env("RUST_LOG", "info,sqlx=warn")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("start the chaos worker");
        Self {
            name: name.to_string(),
            child,
            log,
            exit: None,
            _dir: dir,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (`"TERM"`, `"STOP"`, `"CONT"`, ...).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {} failed", self.pid());
    }

    /// SIGKILLs the process and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        if let Ok(status) = self.child.wait() {
            self.exit = Some(status);
        }
    }

    /// How the process ended, if it did.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().expect("check the worker process");
        }
        self.exit
    }

    /// Waits until the process ends; panics after `limit`.
    pub async fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit within {limit:?}\n{}",
                self.name,
                self.log_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Sends SIGTERM and asserts that the process exits 0 within 40 s: a graceful shutdown.
    pub async fn stop_gracefully(&mut self) {
        self.signal("TERM");
        let status = self.wait_exit(Duration::from_secs(40)).await;
        assert_eq!(status.code(), Some(0), "{} exit", self.name);
    }

    /// Whether the process is still running.
    pub fn is_alive(&mut self) -> bool {
        self.exited().is_none()
    }

    /// Everything the process logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Waits until the worker has logged `text`.
    pub async fn wait_for_log(&self, text: &str, limit: Duration) {
        wait_until(
            &format!("{} to log {text:?}", self.name),
            limit,
            &[self],
            || async { self.log().contains(text) },
        )
        .await;
    }

    /// Waits until the worker runs (its signal handlers are in place).
    pub async fn wait_started(&self) {
        self.wait_for_log("worker started", Duration::from_secs(20))
            .await;
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- log of {} ---\n{}", self.name, self.log_tail(60));
        }
    }
}

/// What a chaos test prints: what it injected and what it cost.
pub struct Figures {
    test: &'static str,
    lines: Vec<(String, String)>,
}

impl Figures {
    /// No figures yet, of the test described by `test`.
    pub fn new(test: &'static str) -> Self {
        Self {
            test,
            lines: Vec::new(),
        }
    }

    /// Adds one figure.
    pub fn add(&mut self, name: &str, value: impl std::fmt::Display) -> &mut Self {
        self.lines.push((name.to_string(), value.to_string()));
        self
    }

    /// Adds what became of the jobs: completed, `lost`, run more than once, and rescued
    /// through an expired lease.
    pub async fn outcome(&mut self, db: &ChaosDb, lost: impl std::fmt::Display) -> &mut Self {
        self.add("completed", db.count_in("done").await)
            .add("lost", lost)
            .add("run more than once", db.run_more_than_once().await.len())
            .add("rescued (lease expired)", db.rescued().await)
    }

    /// Prints the figures (shown with `cargo test -- --nocapture`).
    pub fn print(&self) {
        let width = self
            .lines
            .iter()
            .map(|(name, _)| name.len())
            .max()
            .unwrap_or(0);
        let mut text = format!("\n== chaos: {}\n", self.test);
        for (name, value) in &self.lines {
            text.push_str(&format!("   {name:<width$}  {value}\n"));
        }
        println!("{text}");
    }
}

/// Seconds with two decimals.
pub fn secs(duration: Duration) -> String {
    format!("{:.2} s", duration.as_secs_f64())
}
