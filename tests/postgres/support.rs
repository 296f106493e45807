//! Shared test support: a migrated database per test, workers with fast settings, polling with
//! a deadline, and typed views of job rows.

use std::time::Duration;

use jobs::{JobId, Worker, WorkerBuilder, WorkerConfig, WorkerError, WorkerHandle};
use sqlx::{PgPool, Postgres};

jobs_testkit::suite_db! {
    /// The test kit's fresh, migrated database, with a `runs` table where test jobs record each
    /// run.
    Db
}

impl Db {
    /// A migrated database with an empty `runs` table.
    pub async fn new() -> Self {
        let db = jobs_testkit::Db::migrated().await;
        db.execute(
            "CREATE TABLE runs (job_id bigint NOT NULL, attempt integer NOT NULL, ran_at timestamptz NOT NULL DEFAULT clock_timestamp())",
        )
        .await;
        db.into()
    }

    /// Inserts ready jobs of `kind` in queue `default` with `payload`, one per key of `keys`, in
    /// that order, the key in column `column` (`fair_key`, `limit_key`), as plain SQL.
    pub async fn insert_keyed(&self, kind: &str, column: &str, payload: &str, keys: &[&str]) {
        sqlx::query(&format!(
            "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, {column})
             SELECT $1, 'default', $2::jsonb, 8, key
             FROM unnest($3::text[]) WITH ORDINALITY AS keys(key, place)
             ORDER BY place"
        ))
        .bind(kind)
        .bind(payload)
        .bind(keys)
        .execute(&self.pool)
        .await
        .unwrap();
    }

    /// Puts job `id` on its last attempt: one attempt to go.
    pub async fn put_on_last_attempt(&self, id: i64) {
        sqlx::query("UPDATE jobs_queue SET attempts = max_attempts - 1 WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await
            .unwrap();
    }

    /// Starts a worker for `kinds` with fast polling and rescue, and the pool as state.
    pub fn start_worker(&self, kinds: &[&str]) -> WorkerHandle {
        start_worker(&self.pool, kinds, fast_config())
    }

    /// How many runs job `id` recorded in `runs`.
    pub async fn runs_of(&self, id: JobId) -> i64 {
        self.count(&format!("SELECT count(*) FROM runs WHERE job_id = {id}"))
            .await
    }

    /// Job `id`'s row as tests look at it.
    pub async fn job(&self, id: JobId) -> JobRow {
        sqlx::query_as(
            "SELECT kind, state, attempts, max_attempts, errors,
                    extract(epoch FROM run_at - now())::float8 AS ready_in_secs
             FROM jobs_queue WHERE id = $1",
        )
        .bind(id)
        .fetch_one(&self.pool)
        .await
        .expect("job row")
    }

    /// Waits until job `id` is in `state`, or panics after 20 s; returns its row then.
    pub async fn wait_for_state(&self, id: JobId, state: &str) -> JobRow {
        wait_until(&format!("job {id} to be {state}"), || async {
            self.job_value::<String>(id, "state").await == state
        })
        .await;
        self.job(id).await
    }

    /// Starts a worker for `kinds` (as [`start_worker`](Self::start_worker) does), waits until
    /// job `id` is in `state`, and shuts the worker down; returns the job's row as it was
    /// reached.
    pub async fn run_until(&self, kinds: &[&str], id: JobId, state: &str) -> JobRow {
        let [job] = self.run_until_each(kinds, [(id, state)]).await;
        job
    }

    /// Starts a worker for `kinds`, waits until each job is in its state, in order, and shuts
    /// the worker down; returns the jobs' rows as they were reached.
    pub async fn run_until_each<const N: usize>(
        &self,
        kinds: &[&str],
        jobs: [(JobId, &str); N],
    ) -> [JobRow; N] {
        let worker = self.start_worker(kinds);
        let mut rows = Vec::with_capacity(N);
        for (id, state) in jobs {
            rows.push(self.wait_for_state(id, state).await);
        }
        worker.shutdown().await.expect("the worker stops");
        rows.try_into().expect("one row per job")
    }

    /// Makes job `id` look claimed by a worker that died: running after `attempts` attempts,
    /// under a lease token of its own that expired a second ago.
    pub async fn abandon(&self, id: JobId, attempts: i32) {
        sqlx::query(
            "UPDATE jobs_queue SET state = 'running', attempts = $2, lease_token = gen_random_uuid(),
                    lease_expires_at = now() - interval '1 second' WHERE id = $1",
        )
        .bind(id)
        .bind(attempts)
        .execute(&self.pool)
        .await
        .unwrap();
    }

    /// Gives job `id` another lease token, as another worker taking it over (after a rescue
    /// and a new claim) would; returns the new token.
    pub async fn take_over(&self, id: JobId) -> uuid::Uuid {
        sqlx::query_scalar(
            "UPDATE jobs_queue SET lease_token = gen_random_uuid() WHERE id = $1 RETURNING lease_token",
        )
        .bind(id)
        .fetch_one(&self.pool)
        .await
        .unwrap()
    }

    /// Job `id`'s state and lease token.
    pub async fn state_and_token(&self, id: JobId) -> (String, Option<uuid::Uuid>) {
        sqlx::query_as("SELECT state, lease_token FROM jobs_queue WHERE id = $1")
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    /// When job `id`'s lease expires, in seconds since the epoch (`None` without a lease).
    pub async fn lease_expiry(&self, id: JobId) -> Option<f64> {
        self.job_value(id, "extract(epoch FROM lease_expires_at)::float8")
            .await
    }

    /// The value of the SQL `expression` over job `id`'s row.
    pub async fn job_value<T>(&self, id: JobId, expression: &str) -> T
    where
        T: for<'r> sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres> + Send + Unpin,
    {
        sqlx::query_scalar(&format!(
            "SELECT {expression} FROM jobs_queue WHERE id = $1"
        ))
        .bind(id)
        .fetch_one(&self.pool)
        .await
        .unwrap_or_else(|error| panic!("{expression} of job {id}: {error}"))
    }

    /// Waits until the database's clock is past `epoch_secs` (seconds since the epoch) by
    /// `margin_secs`; panics after 20 s naming `what` it waited for.
    pub async fn wait_for_clock_past(&self, what: &str, epoch_secs: f64, margin_secs: f64) {
        wait_until(what, || async {
            sqlx::query_scalar::<_, bool>("SELECT extract(epoch FROM now())::float8 > $1 + $2")
                .bind(epoch_secs)
                .bind(margin_secs)
                .fetch_one(&self.pool)
                .await
                .unwrap()
        })
        .await;
    }

    /// Creates the `releases` table that [`waits_for_release`](crate::test_jobs::waits_for_release)
    /// jobs watch.
    pub async fn create_releases(&self) {
        self.execute("CREATE TABLE releases (job_id bigint PRIMARY KEY)")
            .await;
    }

    /// Lets the [`waits_for_release`](crate::test_jobs::waits_for_release) job `id` finish.
    pub async fn release(&self, id: JobId) {
        sqlx::query("INSERT INTO releases (job_id) VALUES ($1)")
            .bind(id)
            .execute(&self.pool)
            .await
            .unwrap();
    }
}

/// Worker settings for tests: quick polling and rescue, short grace.
pub fn fast_config() -> WorkerConfig {
    WorkerConfig {
        poll_interval: Duration::from_millis(50),
        rescue_interval: Duration::from_millis(200),
        ..WorkerConfig::default()
    }
}

/// [`fast_config`] with leases of `lease`, heartbeated every `heartbeat`.
pub fn leased_config(lease: Duration, heartbeat: Duration) -> WorkerConfig {
    WorkerConfig {
        lease,
        heartbeat_interval: heartbeat,
        ..fast_config()
    }
}

/// Starts a worker for `kinds` on `pool` with `config`, the pool as its state.
pub fn start_worker(pool: &PgPool, kinds: &[&str], config: WorkerConfig) -> WorkerHandle {
    Worker::builder(pool.clone())
        .kinds(kinds.iter().copied())
        .state(pool.clone())
        .config(config)
        .build()
        .expect("worker builds")
        .start()
}

/// The error `builder`'s worker refuses to start with; panics if it builds.
pub fn refusal(builder: WorkerBuilder) -> WorkerError {
    builder
        .build()
        .err()
        .expect("the worker must refuse to start")
}

pub use jobs_testkit::wait_until;

/// A job row, as tests look at it.
#[derive(Debug, sqlx::FromRow)]
pub struct JobRow {
    pub kind: String,
    pub state: String,
    pub attempts: i32,
    pub max_attempts: i32,
    pub errors: sqlx::types::Json<Vec<AttemptRecord>>,
    /// Seconds from now until `run_at` (negative when due).
    pub ready_in_secs: f64,
}

/// One entry of a job's error history.
#[derive(Debug, serde::Deserialize)]
pub struct AttemptRecord {
    pub attempt: i32,
    pub kind: String,
    pub error: String,
    pub at: String,
}
