//! Under a backlog of short jobs a producer claims ahead of its free slots, so that one claim
//! serves several rounds of them; the jobs claimed ahead never wait long, and go back to the
//! queue in their place when they would.

use std::time::Duration;

use crate::support::{fast_config, start_worker, Db};
use crate::test_jobs::{send_receipt, waits_for_release};
use jobs::WorkerConfig;

/// The slots of the workers below.
const CONCURRENCY: usize = 2;

/// Short jobs enqueued before the long ones.
const SHORT_JOBS: i64 = 400;

/// Long jobs enqueued after the short ones.
const LONG_JOBS: i64 = 20;

/// A worker draining short jobs, with a batch window long enough that every slot frees within
/// it, however slow the machine: it claims ahead.
fn draining_config() -> WorkerConfig {
    WorkerConfig {
        default_concurrency: CONCURRENCY,
        claim_batch_window: Duration::from_millis(100),
        ..fast_config()
    }
}

/// The claims run by the connections of `pool`, from their prepared statements.
async fn claims_run(pool: &sqlx::PgPool) -> i64 {
    let mut connections = Vec::new();
    let mut claims = 0;
    for _ in 0..pool.size() {
        let mut connection = pool.acquire().await.unwrap();
        let executions: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(generic_plans + custom_plans), 0)::bigint
             FROM pg_prepared_statements
             WHERE statement LIKE '%FOR UPDATE SKIP LOCKED%' AND statement LIKE '%SET state = ''running''%'",
        )
        .fetch_one(&mut *connection)
        .await
        .unwrap();
        claims += executions;
        // Kept until every connection is counted, so that each is counted once.
        connections.push(connection);
    }
    claims
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_of_short_jobs_is_claimed_ahead_of_the_free_slots() {
    let db = Db::new().await;
    let jobs = 3_000;
    let args = (0..jobs).map(|order_id| send_receipt::Args { order_id });
    send_receipt::enqueue_many(&db.pool, args).await.unwrap();
    let pool = db.other_pool(10).await;
    let config = draining_config();
    let claim_ahead = i64::try_from(config.claim_ahead).unwrap();
    let worker = start_worker(&pool, &["send_receipt"], config);
    db.wait_for_count(
        "every job done",
        "SELECT count(*) FROM jobs_queue WHERE state = 'done'",
        jobs,
    )
    .await;
    worker.shutdown().await.unwrap();
    let claims = claims_run(&pool).await;
    println!("{claims} claims for {jobs} jobs at concurrency {CONCURRENCY}");
    // Claims of the free slots alone would be at least one per CONCURRENCY jobs.
    assert!(
        claims <= jobs / (claim_ahead / 2),
        "{claims} claims for {jobs} jobs: the claims took no more than their free slots"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE attempts <> 1")
            .await,
        0,
        "every job ran once"
    );
}

/// Enqueues [`SHORT_JOBS`] short jobs, then [`LONG_JOBS`] jobs that run until released, starts
/// a worker for both, and waits until the first long jobs fill its slots. Returns the worker and
/// the long jobs' ids.
async fn long_jobs_behind_a_short_backlog(
    db: &Db,
    config: WorkerConfig,
) -> (jobs::WorkerHandle, Vec<i64>) {
    db.create_releases().await;
    let args = (0..SHORT_JOBS).map(|order_id| send_receipt::Args { order_id });
    send_receipt::enqueue_many(&db.pool, args).await.unwrap();
    let mut long = Vec::new();
    for _ in 0..LONG_JOBS {
        long.push(waits_for_release::enqueue(&db.pool).await.unwrap().id());
    }
    let worker = start_worker(&db.pool, &["send_receipt", "waits_for_release"], config);
    db.wait_for_count(
        "the short jobs done",
        "SELECT count(*) FROM jobs_queue WHERE kind = 'send_receipt' AND state = 'done'",
        SHORT_JOBS,
    )
    .await;
    (worker, long)
}

/// The long jobs' `(state, attempts, run_at unchanged, ever claimed)`, in id order.
async fn long_jobs(db: &Db, run_ats: &[(i64, f64)]) -> Vec<(String, i32, bool, bool)> {
    let rows: Vec<(i64, String, i32, f64, bool)> = db
        .rows(
            "SELECT id, state, attempts, extract(epoch FROM run_at)::float8,
                    attempted_at IS NOT NULL
             FROM jobs_queue WHERE kind = 'waits_for_release' ORDER BY id",
        )
        .await;
    rows.into_iter()
        .zip(run_ats)
        .map(
            |((id, state, attempts, run_at, claimed), (enqueued_id, enqueued_at))| {
                assert_eq!(id, *enqueued_id);
                (state, attempts, run_at == *enqueued_at, claimed)
            },
        )
        .collect()
}

/// The jobs claimed ahead behind jobs that turned out long are handed back once they have
/// waited a moment: ready again, their attempt given back, in their place in the claim order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_claimed_ahead_behind_long_jobs_go_back_in_their_place() {
    let db = Db::new().await;
    let (worker, long) = long_jobs_behind_a_short_backlog(&db, draining_config()).await;
    let run_ats: Vec<(i64, f64)> = db
        .rows(
            "SELECT id, extract(epoch FROM run_at)::float8 FROM jobs_queue
             WHERE kind = 'waits_for_release' ORDER BY id",
        )
        .await;
    let waiting = i64::try_from(long.len() - CONCURRENCY).unwrap();
    db.wait_for_count(
        "the long jobs without a slot back in the queue",
        "SELECT count(*) FROM jobs_queue WHERE kind = 'waits_for_release' AND state = 'ready'",
        waiting,
    )
    .await;
    let rows = long_jobs(&db, &run_ats).await;
    let running = rows.iter().filter(|row| row.0 == "running").count();
    assert_eq!(running, CONCURRENCY, "{rows:?}");
    let handed_back: Vec<_> = rows.iter().filter(|row| row.0 == "ready").collect();
    assert!(
        handed_back.iter().any(|row| row.3),
        "some long jobs were claimed ahead: {rows:?}"
    );
    for row in handed_back {
        assert_eq!(row.1, 0, "the attempt is given back: {rows:?}");
        assert!(row.2, "the job keeps its run_at: {rows:?}");
    }
    for id in &long {
        db.release(*id).await;
    }
    db.wait_for_count(
        "every long job done",
        "SELECT count(*) FROM jobs_queue WHERE kind = 'waits_for_release' AND state = 'done'",
        LONG_JOBS,
    )
    .await;
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE attempts <> 1")
            .await,
        0,
        "every job ran once"
    );
    worker.shutdown().await.unwrap();
}

/// A graceful shutdown leaves no job claimed ahead `running`: each is handed back with its
/// attempt given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_shutdown_hands_back_the_jobs_claimed_ahead() {
    let db = Db::new().await;
    // The long jobs running when the grace period ends are interrupted and handed back too.
    let config = WorkerConfig {
        shutdown_grace: Duration::from_millis(300),
        ..draining_config()
    };
    let (worker, _long) = long_jobs_behind_a_short_backlog(&db, config).await;
    db.wait_for_count(
        "the long jobs to fill the slots",
        "SELECT count(*) FROM runs",
        i64::try_from(CONCURRENCY).unwrap(),
    )
    .await;
    worker.shutdown().await.unwrap();
    let rows: Vec<(String, i32)> = db
        .rows("SELECT state, attempts FROM jobs_queue WHERE kind = 'waits_for_release' ORDER BY id")
        .await;
    assert!(
        rows.iter()
            .all(|(state, attempts)| state == "ready" && *attempts == 0),
        "every long job handed back, its attempt given back: {rows:?}"
    );
}
