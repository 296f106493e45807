//! Shared test support: a migrated database per test, workers with fast settings, polling with
//! a deadline, and typed views of job rows.

use std::time::Duration;

use jobs::postgres::testing::TestDatabase;
use jobs::{JobId, Worker, WorkerConfig, WorkerHandle};
use sqlx::PgPool;

/// A fresh, migrated database with a `runs` table where test jobs record each run.
pub struct Db {
    pub pool: PgPool,
    _database: TestDatabase,
}

impl Db {
    pub async fn new() -> Self {
        let database = TestDatabase::create().await.expect("create test database");
        let pool = database.pool(20).await.expect("connect to test database");
        jobs::migrate(&pool).await.expect("migrate");
        sqlx::query(
            "CREATE TABLE runs (job_id bigint NOT NULL, attempt integer NOT NULL, ran_at timestamptz NOT NULL DEFAULT clock_timestamp())",
        )
        .execute(&pool)
        .await
        .expect("create runs table");
        Self {
            pool,
            _database: database,
        }
    }

    /// The database's URL, for a connection of its own.
    pub fn url(&self) -> String {
        self._database.url().to_string()
    }

    /// A second pool to the same database, as another process would have.
    pub async fn other_pool(&self, connections: u32) -> PgPool {
        self._database.pool(connections).await.expect("connect")
    }

    /// Starts a worker for `kinds` with fast polling and rescue, and the pool as state.
    pub fn start_worker(&self, kinds: &[&str]) -> WorkerHandle {
        start_worker(&self.pool, kinds, fast_config())
    }

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

    pub async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(&self.pool)
            .await
            .expect("count query")
    }

    /// Waits until job `id` is in `state`, or panics after 20 s.
    pub async fn wait_for_state(&self, id: JobId, state: &str) -> JobRow {
        let pool = self.pool.clone();
        let state = state.to_string();
        wait_until(&format!("job {id} to be {state}"), || {
            let pool = pool.clone();
            let state = state.clone();
            async move {
                let current: String =
                    sqlx::query_scalar("SELECT state FROM jobs_queue WHERE id = $1")
                        .bind(id)
                        .fetch_one(&pool)
                        .await
                        .expect("state");
                current == state
            }
        })
        .await;
        self.job(id).await
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

pub fn start_worker(pool: &PgPool, kinds: &[&str], config: WorkerConfig) -> WorkerHandle {
    Worker::builder(pool.clone())
        .kinds(kinds.iter().copied())
        .state(pool.clone())
        .config(config)
        .build()
        .expect("worker builds")
        .start()
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

/// Every node of an `EXPLAIN (FORMAT JSON)` plan, depth first.
pub fn plan_nodes(plan: &serde_json::Value) -> Vec<serde_json::Value> {
    fn walk(node: &serde_json::Value, into: &mut Vec<serde_json::Value>) {
        into.push(node.clone());
        for child in node["Plans"].as_array().into_iter().flatten() {
            walk(child, into);
        }
    }
    let mut nodes = Vec::new();
    walk(&plan[0]["Plan"], &mut nodes);
    nodes
}

/// The `(node type, index name)` of every plan node that reads `relation`.
pub fn scans_of(nodes: &[serde_json::Value], relation: &str) -> Vec<(String, String)> {
    nodes
        .iter()
        .filter(|node| node["Relation Name"] == relation)
        .map(|node| {
            (
                node["Node Type"].as_str().unwrap_or_default().to_string(),
                node["Index Name"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}
