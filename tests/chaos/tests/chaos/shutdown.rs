//! Injects: SIGTERM (once, then twice) to a worker process running long jobs. Proves: after one
//! signal, jobs that finish within the grace period are done, the rest are ready again at once
//! with their attempt count unchanged, and the process exits 0; after a second signal, the
//! process exits at once (143) and the jobs it held come back when their leases expire.

use std::time::{Duration, Instant};

use jobs::JobId;
use jobs_chaos::long_job;

use crate::support::{alone_on_shared_server, ids_of, secs, ChaosDb, Figures, Worker};

const GRACE: Duration = Duration::from_secs(3);

async fn enqueue_long(db: &ChaosDb, count: usize, sleep_ms: u64, only_first: bool) -> Vec<JobId> {
    ids_of(
        long_job::enqueue_many(
            &db.pool,
            (0..count).map(|_| long_job::Args {
                sleep_ms,
                only_first_attempt: only_first,
            }),
        )
        .await,
    )
}

#[derive(Debug, sqlx::FromRow)]
struct Row {
    state: String,
    attempts: i32,
    due: bool,
    errors: i32,
}

async fn rows(db: &ChaosDb, ids: &[JobId]) -> Vec<Row> {
    sqlx::query_as(
        "SELECT state, attempts, run_at <= now() AS due, jsonb_array_length(errors) AS errors
         FROM jobs_queue WHERE id = ANY($1) ORDER BY id",
    )
    .bind(ids)
    .fetch_all(&db.pool)
    .await
    .expect("job rows")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_jobs_finish_within_grace_and_hands_back_the_rest() {
    let (_serial, db) = alone_on_shared_server().await;
    let mut settings = db.settings();
    settings.grace = GRACE;
    let finishing = enqueue_long(&db, 4, 1_000, false).await;
    let outlasting = enqueue_long(&db, 4, 60_000, false).await;
    let mut worker = Worker::spawn("worker", &settings);
    db.wait_for_runs(8, &[&worker]).await;
    worker.signal("TERM");
    let signalled = Instant::now();
    let status = worker.wait_exit(Duration::from_secs(20)).await;
    let exited = signalled.elapsed();

    let finished = rows(&db, &finishing).await;
    let handed_back = rows(&db, &outlasting).await;
    Figures::new("SIGTERM during 8 long jobs (4 of 1 s, 4 of 60 s), grace 3 s")
        .add("jobs enqueued", 8)
        .add(
            "completed within grace",
            finished.iter().filter(|row| row.state == "done").count(),
        )
        .add(
            "handed back ready, attempt not counted",
            handed_back
                .iter()
                .filter(|row| row.state == "ready" && row.attempts == 0 && row.due)
                .count(),
        )
        .add("lost", 0)
        .add("run more than once", db.run_more_than_once().await.len())
        .add("time to recover: SIGTERM -> exit, rest ready", secs(exited))
        .add("exit code", format!("{:?}", status.code()))
        .print();

    assert_eq!(status.code(), Some(0), "{}", worker.log_tail(20));
    for row in &finished {
        assert_eq!((row.state.as_str(), row.attempts), ("done", 1), "{row:?}");
    }
    for row in &handed_back {
        assert_eq!(row.state, "ready", "{row:?}");
        assert_eq!(
            row.attempts, 0,
            "the interrupted attempt is not counted: {row:?}"
        );
        assert!(row.due, "ready again at once: {row:?}");
        assert_eq!(row.errors, 0, "{row:?}");
    }
    assert!(exited >= GRACE, "the grace period was honoured");
    assert!(
        exited < GRACE + Duration::from_secs(3),
        "handed back at the end of the grace period"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_exits_at_once_and_leases_bring_the_jobs_back() {
    let (_serial, db) = alone_on_shared_server().await;
    let ids = enqueue_long(&db, 4, 60_000, true).await;
    // Grace 30 s: only the second signal can end it quickly.
    let mut worker = db.spawn_worker("worker");
    db.wait_for_runs(4, &[&worker]).await;
    worker.signal("TERM");
    worker
        .wait_for_log("shutting down gracefully", Duration::from_secs(10))
        .await;
    worker.signal("TERM");
    let signalled = Instant::now();
    let status = worker.wait_exit(Duration::from_secs(10)).await;
    let exited = signalled.elapsed();
    let left = rows(&db, &ids).await;

    let successor = db.spawn_worker("successor");
    db.wait_all_done(&ids, Duration::from_secs(20), &[&successor])
        .await;
    let back = signalled.elapsed();
    Figures::new("SIGTERM twice during 4 jobs of 60 s (grace 30 s, lease 2 s)")
        .add("jobs enqueued", 4)
        .outcome(&db, 4 - db.count_in("done").await)
        .await
        .add("second SIGTERM -> exit", secs(exited))
        .add("exit code", format!("{:?}", status.code()))
        .add(
            "time to recover: second SIGTERM -> jobs done again",
            secs(back),
        )
        .print();

    assert_eq!(status.code(), Some(143), "{}", worker.log_tail(20));
    assert!(
        exited < Duration::from_secs(2),
        "exits at once, not after the grace period"
    );
    for row in &left {
        assert_eq!(
            (row.state.as_str(), row.attempts),
            ("running", 1),
            "left to its lease: {row:?}"
        );
    }
    let rescued = db.rescued().await;
    assert_eq!(rescued, 4, "each job came back through its expired lease");
}
