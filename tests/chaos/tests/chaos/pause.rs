//! Injects: SIGSTOP on a worker process while it runs two jobs, for longer than its lease, then
//! SIGCONT once another worker has rescued, re-claimed and finished them. Proves: the paused
//! worker cannot record anything (its verdict would have made a job dead); each job's final
//! state is the one the re-claiming worker wrote; the paused worker logs "lease lost", and a job
//! waiting on `ctx.lease_lost()` hears of it.

use std::time::{Duration, Instant};

use jobs_chaos::{stale_then_fresh, watches_its_lease};

use crate::support::{alone_on_shared_server, error_kinds, secs, wait_until, Figures};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_worker_cannot_complete_a_job_it_lost() {
    let (_serial, db) = alone_on_shared_server().await;
    // Works 4 s on its first attempt, then fails permanently: a verdict that must never land.
    let stale = stale_then_fresh::enqueue(&db.pool, 4_000)
        .await
        .expect("enqueue")
        .id();
    let watcher = watches_its_lease::enqueue(&db.pool)
        .await
        .expect("enqueue")
        .id();
    let mut paused = db.spawn_worker("paused");
    let pid = paused.pid();
    wait_until(
        "the first worker to run both jobs",
        Duration::from_secs(20),
        &[&paused],
        || async { db.runs_by(pid).await == 2 },
    )
    .await;
    paused.signal("STOP");
    let stopped_at = Instant::now();

    let mut rescuer = db.spawn_worker("rescuer");
    for id in [stale, watcher] {
        wait_until(
            &format!("job {id} to be done by the second worker"),
            Duration::from_secs(20),
            &[&rescuer],
            || async { db.state_of(id).await == "done" },
        )
        .await;
    }
    let taken_over = stopped_at.elapsed();
    paused.signal("CONT");
    let continued = Instant::now();
    paused
        .wait_for_log("this run's outcome is dropped", Duration::from_secs(20))
        .await;
    let outcome_dropped = continued.elapsed();
    wait_until(
        "the watching job to notice its lease lost",
        Duration::from_secs(20),
        &[&paused],
        || async { db.scalar_i64("SELECT count(*) FROM notices").await == 1 },
    )
    .await;
    let noticed = continued.elapsed();

    let (state, attempts, errors): (String, i32, serde_json::Value) =
        sqlx::query_as("SELECT state, attempts, errors FROM jobs_queue WHERE id = $1")
            .bind(stale)
            .fetch_one(&db.pool)
            .await
            .expect("the stale job");
    let (notice_pid, noticed_renewal): (i32, String) =
        sqlx::query_as("SELECT pid, noticed FROM notices")
            .fetch_one(&db.pool)
            .await
            .expect("the notice");
    let watcher_state = db.state_of(watcher).await;
    let log = paused.log();
    Figures::new("SIGSTOP past the lease (2 s), SIGCONT after another worker finished the jobs")
        .add("jobs enqueued", 2)
        .outcome(&db, 2 - db.count_in("done").await)
        .await
        .add(
            "time to recover: SIGSTOP -> jobs done elsewhere",
            secs(taken_over),
        )
        .add("SIGCONT -> stale outcome dropped", secs(outcome_dropped))
        .add("SIGCONT -> job saw ctx.lease_lost()", secs(noticed))
        .add(
            "\"lease lost\" lines logged by the paused worker",
            log.matches("lease lost").count(),
        )
        .add(
            "the stale job's final state",
            format!("{state}, attempt {attempts}"),
        )
        .print();

    assert_eq!(state, "done", "the re-claiming worker's verdict stands");
    assert_eq!(attempts, 2);
    assert_eq!(
        error_kinds(&errors),
        ["lease_expired"],
        "nothing from the paused run: {errors}"
    );
    assert_eq!(watcher_state, "done");
    assert_eq!(u32::try_from(notice_pid).ok(), Some(pid));
    assert_eq!(
        noticed_renewal,
        jobs::LeaseError::Lost.to_string(),
        "renewing a lost lease says so"
    );
    assert!(log.contains("lease lost"));

    paused.stop_gracefully().await;
    rescuer.stop_gracefully().await;
}
