//! Injects: `pg_terminate_backend` on every connection of two worker processes (found by their
//! `application_name`) every 200 ms for 10 s, while jobs keep arriving. Proves: the workers stay
//! up, reconnect (and re-LISTEN) each time, and every job completes.

use std::time::{Duration, Instant};

use jobs_chaos::APPLICATION_NAME;

use crate::support::{alone_on_shared_server, secs, Figures};

const FAULT: Duration = Duration::from_secs(10);
const EVERY: Duration = Duration::from_millis(200);
const INITIAL_JOBS: usize = 500;
const JOBS_PER_TICK: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backends_terminated_every_200_ms_for_10_s() {
    let (_serial, db) = alone_on_shared_server().await;
    let mut ids = db.enqueue_chaos_jobs(INITIAL_JOBS, 5).await;
    let mut first = db.spawn_worker("worker-1");
    let mut second = db.spawn_worker("worker-2");
    first.wait_started().await;
    second.wait_started().await;

    let started = Instant::now();
    let mut terminated = 0_i64;
    let mut ticks = 0;
    while started.elapsed() < FAULT {
        let killed: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND application_name = $1) AS terminated",
        )
        .bind(APPLICATION_NAME)
        .fetch_one(&db.pool)
        .await
        .expect("terminate the workers' backends");
        terminated += killed;
        ticks += 1;
        ids.extend(db.enqueue_chaos_jobs(JOBS_PER_TICK, 5).await);
        tokio::time::sleep(EVERY).await; // the fault's rhythm
    }
    let fault_over = Instant::now();
    let done_during_fault = db.count_in("done").await;
    assert!(first.is_alive(), "worker-1 exited");
    assert!(second.is_alive(), "worker-2 exited");
    db.wait_all_done(&ids, Duration::from_secs(60), &[&first, &second])
        .await;
    let recovered = fault_over.elapsed();

    let lost = db.lost(&ids).await;
    let failed_attempts = db.attempts_failed_otherwise().await;
    let reconnects = [&first, &second]
        .iter()
        .map(|worker| worker.log().matches("; reconnecting").count())
        .sum::<usize>();
    Figures::new("pg_terminate_backend on every worker connection every 200 ms for 10 s")
        .add("jobs enqueued", ids.len())
        .add(
            "backends terminated",
            format!("{terminated} in {ticks} rounds"),
        )
        .add("LISTEN connections lost and re-made", reconnects)
        .add("done during the fault", done_during_fault)
        .outcome(&db, lost.len())
        .await
        .add("attempts failed by a cut connection", failed_attempts)
        .add("time to recover: fault over -> all done", secs(recovered))
        .print();
    assert!(lost.is_empty(), "lost jobs: {lost:?}");
    assert!(terminated > 0);

    first.stop_gracefully().await;
    second.stop_gracefully().await;
}
