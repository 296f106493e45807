//! `jobs stats`: a table for people, JSON for machines.

use crate::fixtures::{backdate, json_of, postpone, RunOutput};
use crate::support::Db;

/// Three ready jobs, the oldest due 90 s ago, two scheduled in an hour and one running, of
/// `send_email`; two dead and seven done of `resize`; the table analyzed.
async fn fill(db: &Db) {
    let ready = db.insert(3, "send_email", "email", "ready").await;
    backdate(db, &ready[..1], &["run_at"], "90 seconds").await;
    let scheduled = db.insert(2, "send_email", "email", "ready").await;
    postpone(db, &scheduled, "1 hour").await;
    db.insert(1, "send_email", "email", "running").await;
    db.insert(2, "resize", "default", "dead").await;
    db.insert(7, "resize", "default", "done").await;
    db.execute("ANALYZE jobs_queue").await;
}

/// A migrated database whose job table autovacuum leaves alone: no planner statistics appear
/// unless the test runs `ANALYZE`.
async fn unanalyzed() -> Db {
    let db = Db::migrated().await;
    db.execute("ALTER TABLE jobs_queue SET (autovacuum_enabled = false)")
        .await;
    db
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_prints_a_table_per_queue_and_kind() {
    let db = Db::migrated().await;
    fill(&db).await;
    let run = db.jobs(&["stats"]).await.success();
    let lines = run.lines();
    assert_eq!(
        lines[0],
        "QUEUE    KIND        WAITING  READY  SCHEDULED  RUNNING  EXPIRED  DEAD  DONE  CANCELLED  OLDEST READY"
    );
    assert_eq!(
        lines[1],
        "default  resize            0      0          0        0        0     2     7          0  -"
    );
    assert!(
        lines[2].starts_with(
            "email    send_email        0      3          2        1        0     0     0          0  1m3"
        ),
        "{}",
        run.stdout
    );
    assert!(lines[3].starts_with("total"), "{}", run.stdout);
    assert_eq!(
        lines[4..],
        ["", "workers: none live"],
        "so few finished jobs are counted: {}",
        run.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_right_after_a_first_run_shows_the_finished_jobs() {
    let db = unanalyzed().await;
    db.insert(4, "send_email", "email", "done").await;
    db.insert(1, "send_email", "email", "cancelled").await;
    assert_eq!(
        db.jobs(&["stats"]).await.success().lines(),
        [
            "QUEUE  KIND        WAITING  READY  SCHEDULED  RUNNING  EXPIRED  DEAD  DONE  CANCELLED  OLDEST READY",
            "email  send_email        0      0          0        0        0     0     4          1  -",
            "",
            "workers: none live",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_mark_estimates_and_say_when_there_is_none() {
    let db = unanalyzed().await;
    db.insert(10_001, "resize", "default", "done").await;
    assert_eq!(
        db.jobs(&["stats"]).await.success().lines(),
        [
            "QUEUE    KIND    WAITING  READY  SCHEDULED  RUNNING  EXPIRED  DEAD  DONE  CANCELLED  OLDEST READY",
            "default  resize        0      0          0        0        0     0     ?          ?  -",
            "? more than 10000 done and cancelled jobs, and no estimate yet: the table has not been \
             analyzed (`ANALYZE jobs_queue`), or this role does not own it",
            "",
            "workers: none live",
        ]
    );
    let stats = json_of(&db, &["stats", "--json"]).await;
    assert_eq!(stats["retained"], "unknown");
    assert_eq!(stats["kinds"][0]["done"], serde_json::Value::Null);

    db.execute("ANALYZE jobs_queue").await;
    let run = db.jobs(&["stats"]).await.success();
    let lines = run.lines();
    assert_eq!(
        lines[..2],
        [
            "QUEUE    KIND    WAITING  READY  SCHEDULED  RUNNING  EXPIRED  DEAD  DONE~  CANCELLED~  OLDEST READY",
            "default  resize        0      0          0        0        0     0  10001           0  -",
        ]
    );
    assert!(
        lines[2].starts_with("~ estimated from the planner's statistics, gathered "),
        "{}",
        run.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_json_is_for_machines() {
    let db = Db::migrated().await;
    fill(&db).await;
    let stats = json_of(&db, &["stats", "--json"]).await;
    let email = &stats["kinds"][1];
    assert_eq!(email["queue"], "email");
    assert_eq!(email["kind"], "send_email");
    assert_eq!(
        (&email["ready"], &email["scheduled"], &email["running"]),
        (&3.into(), &2.into(), &1.into())
    );
    let waited = email["oldest_ready_secs"].as_f64().expect("a number");
    assert!((90.0..150.0).contains(&waited), "{waited}");
    assert_eq!(stats["kinds"][0]["dead"], 2);
    assert_eq!(stats["kinds"][0]["done"], 7);
    assert_eq!(stats["total"]["ready"], 3);
    assert_eq!(stats["retained"], "counted");
    assert_eq!(stats["estimated"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_of_an_empty_queue() {
    let db = Db::migrated().await;
    db.jobs(&["stats"])
        .await
        .prints("no jobs\n\nworkers: none live\n");
}
