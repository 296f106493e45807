//! Counts the statements the worker sends per job in steady state (a count, never a time), so a
//! change that adds round trips to the hot path fails here. Its own binary: it installs a global
//! subscriber that sees every statement sqlx runs in the process.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use jobs::postgres::testing::TestDatabase;
use jobs::postgres::worker::Completion;
use jobs::{job, JobResult, State, Worker, WorkerConfig};
use sqlx::postgres::PgPoolOptions;
use tokio::sync::Notify;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

const JOBS: usize = 2_000;
const CONCURRENCY: usize = 16;
/// Where the hand-backs are counted among the statements: events, not statements. Jobs claimed
/// ahead that waited too long for a slot are handed back unstarted (one outcome statement for
/// them all without a completer), and claimed again.
const HAND_BACKS: &str = "hand-backs (events)";

/// Counts completed jobs and wakes the test when all are done.
#[derive(Default)]
struct Completed {
    count: AtomicUsize,
    all_done: Notify,
}

#[job]
async fn counted(done: State<Completed>, n: i64) -> JobResult {
    let _ = n;
    if done.count.fetch_add(1, Ordering::SeqCst) + 1 == JOBS {
        done.all_done.notify_one();
    }
    Ok(())
}

/// Statements seen, by what they do.
#[derive(Default, Clone)]
struct Statements(Arc<Mutex<BTreeMap<&'static str, usize>>>);

impl Statements {
    fn take(&self) -> BTreeMap<&'static str, usize> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn classify(sql: &str) -> &'static str {
    if sql.contains("FOR UPDATE SKIP LOCKED") && sql.contains("SET state = 'running'") {
        "claim"
    } else if sql.contains("give_back_attempt") {
        "record outcomes"
    } else if sql.contains("FROM unnest($1::bigint[], $2::uuid[]) AS held") {
        "heartbeat"
    } else if sql.contains("jobs_queue_state_mix") {
        "health numbers (gauges)"
    } else if sql.contains("lease_expires_at < now()") {
        "rescue"
    } else {
        "other"
    }
}

struct StatementVisitor(Option<String>);

impl Visit for StatementVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        let is_full_statement = field.name() == "db.statement" && !value.is_empty();
        let is_summary = field.name() == "summary" && self.0.is_none();
        if is_full_statement || is_summary {
            self.0 = Some(value.to_string());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "summary" && self.0.is_none() {
            self.0 = Some(format!("{value:?}"));
        }
    }
}

/// Finds the worker's event of a hand-back: jobs claimed ahead, handed back unstarted.
struct HandBackVisitor(bool);

impl Visit for HandBackVisitor {
    fn record_u64(&mut self, field: &Field, _: u64) {
        self.0 |= field.name() == "handed_back";
    }

    fn record_debug(&mut self, field: &Field, _: &dyn std::fmt::Debug) {
        self.0 |= field.name() == "handed_back";
    }
}

impl<S: tracing::Subscriber> Layer<S> for Statements {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != "sqlx::query" {
            let mut visitor = HandBackVisitor(false);
            event.record(&mut visitor);
            if visitor.0 {
                *self.0.lock().unwrap().entry(HAND_BACKS).or_default() += 1;
            }
            return;
        }
        let mut visitor = StatementVisitor(None);
        event.record(&mut visitor);
        let kind = classify(visitor.0.as_deref().unwrap_or_default());
        *self.0.lock().unwrap().entry(kind).or_default() += 1;
    }
}

async fn drain(
    database: &TestDatabase,
    completion: Completion,
    statements: &Statements,
) -> BTreeMap<&'static str, usize> {
    // A pool of its own, with sqlx's statement logging on (the test database's pools have it off).
    let pool = PgPoolOptions::new()
        .max_connections(CONCURRENCY as u32 + 4)
        .connect(database.url())
        .await
        .unwrap();
    sqlx::query("TRUNCATE jobs_queue")
        .execute(&pool)
        .await
        .unwrap();
    counted::enqueue_many(&pool, (0..JOBS as i64).map(|n| counted::Args { n }))
        .await
        .unwrap();
    let completed = Arc::new(Completed::default());
    statements.take();
    let worker = Worker::builder(pool.clone())
        .kinds(["counted"])
        .queue("default", CONCURRENCY)
        .shared_state(Arc::clone(&completed))
        .config(WorkerConfig {
            completion,
            ..WorkerConfig::default()
        })
        .build()
        .unwrap()
        .start();
    let all_done = completed.all_done.notified();
    if completed.count.load(Ordering::SeqCst) < JOBS {
        tokio::time::timeout(std::time::Duration::from_secs(60), all_done)
            .await
            .expect("all jobs run within 60 s");
    }
    worker.shutdown().await.expect("the worker stops");
    let seen = statements.take();
    let done: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs_queue WHERE state = 'done'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        done, JOBS as i64,
        "every outcome was written before shutdown returned"
    );
    seen
}

fn per_job(seen: &BTreeMap<&'static str, usize>, kind: &str) -> f64 {
    seen.get(kind).copied().unwrap_or(0) as f64 / JOBS as f64
}

#[test]
fn statements_per_job_in_steady_state() {
    let statements = Statements::default();
    let subscriber = tracing_subscriber::registry().with(statements.clone());
    tracing::subscriber::set_global_default(subscriber).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let database = TestDatabase::create().await.unwrap();
        let pool = database.pool(1).await.unwrap();
        jobs::migrate(&pool).await.unwrap();

        let batched = drain(&database, Completion::default(), &statements).await;
        println!("batched completion, {JOBS} jobs at concurrency {CONCURRENCY}: {batched:?}");
        let claims = per_job(&batched, "claim");
        let outcomes = per_job(&batched, "record outcomes");
        println!("  per job: claim {claims:.3}, record outcomes {outcomes:.3}");
        // Claims take up to the free slots; outcomes are written many per statement.
        assert!(claims <= 0.25, "claim statements per job: {claims:.3}");
        assert!(outcomes <= 0.5, "outcome statements per job: {outcomes:.3}");
        assert!(per_job(&batched, "other") <= 0.01, "{batched:?}");

        let per_job_mode = drain(&database, Completion::PerJob, &statements).await;
        println!("per-job completion, {JOBS} jobs at concurrency {CONCURRENCY}: {per_job_mode:?}");
        let claims = per_job(&per_job_mode, "claim");
        let outcomes = per_job(&per_job_mode, "record outcomes");
        println!("  per job: claim {claims:.3}, record outcomes {outcomes:.3}");
        assert!(claims <= 0.25, "claim statements per job: {claims:.3}");
        let hand_backs = per_job_mode.get(HAND_BACKS).copied().unwrap_or(0);
        assert_eq!(
            per_job_mode.get("record outcomes").copied().unwrap_or(0),
            JOBS + hand_backs,
            "one outcome statement per job, and one per hand-back of jobs claimed ahead: {outcomes:.3} per job"
        );
    });
}
