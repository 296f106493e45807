//! Injects: a job that aborts its worker process (`std::process::abort`) on every attempt, in a
//! queue with ordinary jobs, under two worker processes restarted whenever they die (as a
//! service manager would). Proves: the poison job ends dead after its 3 attempts, each recorded
//! as "lease expired", instead of killing workers forever; the other jobs all complete.

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use jobs_chaos::abort_process;

use crate::support::{alone_on_shared_server, error_kinds, secs, Figures};

const OTHER_JOBS: usize = 1_000;
const SIGABRT: i32 = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_aborts_its_process_ends_dead() {
    let (_serial, db) = alone_on_shared_server().await;
    let poison = abort_process::enqueue(&db.pool)
        .await
        .expect("enqueue")
        .id();
    let others = db.enqueue_chaos_jobs(OTHER_JOBS, 10).await;
    let started = Instant::now();
    let mut workers = [db.spawn_worker("worker-a1"), db.spawn_worker("worker-b1")];
    let mut aborts = 0;
    let mut restarts = [1, 1];
    let deadline = Instant::now() + Duration::from_secs(60);
    let poison_dead_after = loop {
        for (slot, worker) in workers.iter_mut().enumerate() {
            if let Some(status) = worker.exited() {
                assert_eq!(
                    status.signal(),
                    Some(SIGABRT),
                    "{} ended otherwise than by abort: {status}",
                    worker.name
                );
                aborts += 1;
                restarts[slot] += 1;
                let name = format!("worker-{}{}", ["a", "b"][slot], restarts[slot]);
                *worker = db.spawn_worker(&name);
            }
        }
        let state = db.state_of(poison).await;
        if state == "dead" {
            break started.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "the poison job is still {state} after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    db.wait_all_done(
        &others,
        Duration::from_secs(60),
        &[&workers[0], &workers[1]],
    )
    .await;
    let all_done = started.elapsed();

    let (attempts, errors): (i32, serde_json::Value) =
        sqlx::query_as("SELECT attempts, errors FROM jobs_queue WHERE id = $1")
            .bind(poison)
            .fetch_one(&db.pool)
            .await
            .expect("the poison job");
    let poison_runs = db
        .scalar_i64(&format!(
            "SELECT count(*) FROM runs WHERE job_id = {poison}"
        ))
        .await;
    let lost = db.lost(&others).await;
    let rerun = db.run_more_than_once().await;
    Figures::new("a job that aborts its process on every attempt (max 3), 2 workers restarted")
        .add("jobs enqueued", OTHER_JOBS + 1)
        .add("completed", db.count_in("done").await)
        .add("dead", db.count_in("dead").await)
        .add("lost", lost.len())
        .add("processes aborted", aborts)
        .add("poison runs", poison_runs)
        .add(
            "run more than once (other jobs)",
            rerun.keys().filter(|id| **id != poison).count(),
        )
        .add(
            "time to recover: poison dead after",
            secs(poison_dead_after),
        )
        .add("all other jobs done after", secs(all_done))
        .print();

    assert!(lost.is_empty(), "lost jobs: {lost:?}");
    assert_eq!(attempts, 3);
    assert_eq!(poison_runs, 3);
    assert_eq!(aborts, 3);
    assert_eq!(error_kinds(&errors), ["lease_expired"; 3]);
}
