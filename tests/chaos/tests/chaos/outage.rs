//! Injects: PostgreSQL stopped (fast shutdown, every connection cut) for 5 s in the middle of a
//! drain by two worker processes, then started again. Proves: no worker process exits, they
//! reconnect and resume on their own, and every job completes.

use std::time::{Duration, Instant};

use jobs_testkit::ThrowawayCluster;

use crate::support::{secs, serial, wait_until, ChaosDb, Figures, Worker};

const JOBS: usize = 3_000;
const OUTAGE: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_for_five_seconds_mid_drain() {
    let _serial = serial().await;
    let cluster = ThrowawayCluster::start().await.expect("start a cluster");
    let db = ChaosDb::on(&cluster.url()).await;
    let settings = db.settings();
    let ids = db.enqueue_chaos_jobs(JOBS, 10).await;
    let mut first = Worker::spawn("worker-1", &settings);
    let mut second = Worker::spawn("worker-2", &settings);
    wait_until(
        "a third of the jobs to be done",
        Duration::from_secs(30),
        &[&first, &second],
        || async { db.count_in("done").await >= i64::try_from(JOBS / 3).unwrap_or(0) },
    )
    .await;

    let done_before = db.count_in("done").await;
    let stopping = Instant::now();
    cluster.stop().await.expect("stop PostgreSQL");
    let stop_took = stopping.elapsed();
    tokio::time::sleep(OUTAGE).await; // the fault itself
    assert!(first.is_alive(), "worker-1 exited during the outage");
    assert!(second.is_alive(), "worker-2 exited during the outage");
    cluster.start_again().await.expect("start PostgreSQL again");
    let back = Instant::now();
    wait_until(
        "the workers to complete jobs again",
        Duration::from_secs(30),
        &[&first, &second],
        || async { db.count_in("done").await > done_before },
    )
    .await;
    let resumed = back.elapsed();
    db.wait_all_done(&ids, Duration::from_secs(60), &[&first, &second])
        .await;
    let all_done = back.elapsed();
    assert!(first.is_alive(), "worker-1 exited");
    assert!(second.is_alive(), "worker-2 exited");

    let lost = db.lost(&ids).await;
    let failed_attempts = db.attempts_failed_otherwise().await;
    Figures::new("PostgreSQL stopped for 5 s mid-drain (2 workers, lease 2 s)")
        .add("jobs enqueued", JOBS)
        .add("done when PostgreSQL stopped", done_before)
        .outcome(&db, lost.len())
        .await
        .add("attempts failed by the outage", failed_attempts)
        .add("worker processes that exited", 0)
        .add("stopping PostgreSQL took", secs(stop_took))
        .add("time to recover: back -> first job done", secs(resumed))
        .add("back -> all done", secs(all_done))
        .print();
    assert!(lost.is_empty(), "lost jobs: {lost:?}");

    first.stop_gracefully().await;
    second.stop_gracefully().await;
}
