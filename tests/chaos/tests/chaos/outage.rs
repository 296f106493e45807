//! Injects: PostgreSQL stopped (fast shutdown, every connection cut) for 5 s in the middle of a
//! drain by two worker processes, then started again. Proves: no worker process exits, they
//! reconnect and resume on their own, and every job completes.

use std::time::{Duration, Instant};

use jobs::JobId;
use jobs_chaos::chaos_job;
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
    let ids: Vec<JobId> = chaos_job::enqueue_many(
        &db.pool,
        (0..JOBS).map(|_| chaos_job::Args { sleep_ms: 10 }),
    )
    .await
    .expect("enqueue")
    .into_iter()
    .map(|enqueued| enqueued.id())
    .collect();
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
    let rerun = db.run_more_than_once().await;
    let failed_attempts = db
        .scalar_i64(
            "SELECT count(*) FROM jobs_queue, jsonb_array_elements(errors) AS e
             WHERE e->>'kind' <> 'lease_expired'",
        )
        .await;
    Figures::new("PostgreSQL stopped for 5 s mid-drain (2 workers, lease 2 s)")
        .add("jobs enqueued", JOBS)
        .add("done when PostgreSQL stopped", done_before)
        .add("completed", db.count_in("done").await)
        .add("lost", lost.len())
        .add("run more than once", rerun.len())
        .add("rescued (lease expired)", db.rescued().await)
        .add("attempts failed by the outage", failed_attempts)
        .add("worker processes that exited", 0)
        .add("stopping PostgreSQL took", secs(stop_took))
        .add("time to recover: back -> first job done", secs(resumed))
        .add("back -> all done", secs(all_done))
        .print();
    assert!(lost.is_empty(), "lost jobs: {lost:?}");

    for worker in [&mut first, &mut second] {
        worker.signal("TERM");
        let status = worker.wait_exit(Duration::from_secs(40)).await;
        assert_eq!(status.code(), Some(0), "{} exit", worker.name);
    }
}
