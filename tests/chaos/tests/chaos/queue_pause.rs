//! Injects: a queue paused while two worker processes drain it, then resumed. Proves: once a
//! claim in flight at the pause has finished, neither process starts another job of the queue;
//! the jobs left wait, ready, without an attempt spent; after the resume both processes drain
//! the rest; nothing is lost or run twice.

use std::time::{Duration, Instant};

use crate::support::{alone_on_shared_server, secs, wait_until, Figures};

/// Jobs enqueued, each working 20 ms: about two seconds of work for the two processes.
const JOBS: usize = 3_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_holds_across_two_worker_processes_until_resumed() {
    let (_serial, db) = alone_on_shared_server().await;
    let first = db.spawn_worker("first");
    let second = db.spawn_worker("second");
    first.wait_started().await;
    second.wait_started().await;
    let ids = db.enqueue_chaos_jobs(JOBS, 20).await;
    let workers = [&first, &second];
    wait_until(
        "300 runs before the pause",
        Duration::from_secs(20),
        &workers,
        || async { db.scalar_i64("SELECT count(*) FROM runs").await >= 300 },
    )
    .await;
    jobs::admin::pause_queue(&db.pool, "chaos", "chaos test", Some("mid-drain"))
        .await
        .expect("pause");
    let paused_at = db.now().await;

    // Half a second (five polls of each process) for claims in flight at the pause and their
    // 20 ms runs to end; then two seconds (twenty polls each) in which nothing may start.
    let settle = db.settings().poll * 5;
    wait_until(
        "the runs in flight to end",
        Duration::from_secs(20),
        &workers,
        || async {
            db.seconds_since(paused_at).await > settle.as_secs_f64()
                && db.running_ids().await.is_empty()
        },
    )
    .await;
    let ran_before_pause = db.scalar_i64("SELECT count(*) FROM runs").await;
    let held_from = db.now().await;
    wait_until(
        "twenty polls of each process",
        Duration::from_secs(20),
        &workers,
        || async { db.seconds_since(held_from).await > 2.0 },
    )
    .await;
    let ran_while_paused = db.scalar_i64("SELECT count(*) FROM runs").await - ran_before_pause;
    assert_eq!(ran_while_paused, 0, "no job of a paused queue starts");
    let waiting = db
        .scalar_i64("SELECT count(*) FROM jobs_queue WHERE state = 'ready' AND attempts = 0")
        .await;
    assert_eq!(
        waiting,
        JOBS as i64 - ran_before_pause,
        "the rest wait, no attempt spent"
    );
    assert!(waiting > 0, "the pause came before the drain ended");

    let resumed = Instant::now();
    jobs::admin::resume_queue(&db.pool, "chaos")
        .await
        .expect("resume");
    db.wait_all_done(&ids, Duration::from_secs(30), &workers)
        .await;
    let drained_after_resume = resumed.elapsed();
    let lost = db.lost(&ids).await;
    assert!(lost.is_empty(), "lost: {lost:?}");
    assert!(db.run_more_than_once().await.is_empty());
    for worker in workers {
        assert!(
            db.runs_by(worker.pid()).await > 0,
            "{} ran jobs",
            worker.name
        );
    }
    Figures::new("a queue paused mid-drain across two worker processes, then resumed")
        .add("jobs", JOBS)
        .add("run before the pause took hold", ran_before_pause)
        .add("run while paused (2 s, 20 polls each)", ran_while_paused)
        .add("waiting at the resume", waiting)
        .add("drained after the resume in", secs(drained_after_resume))
        .outcome(&db, lost.len())
        .await
        .print();
    let (mut first, mut second) = (first, second);
    first.stop_gracefully().await;
    second.stop_gracefully().await;
}
