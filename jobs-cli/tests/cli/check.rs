//! `jobs check`: exit 0 when healthy; exit 1 and one line per threshold crossed, naming the
//! kind and the number.

use crate::fixtures::{
    assert_check_passes, assert_framed, backdate, live_worker, RunOutput, Schedule,
};
use crate::support::Db;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_queue_passes() {
    let db = Db::migrated().await;
    db.insert(2, "send_email", "email", "ready").await;
    db.insert(1, "resize", "default", "running").await;
    db.insert(5, "resize", "default", "done").await;
    db.jobs(&["check"])
        .await
        .prints("ok: 2 kinds in 2 queues; 2 ready, 1 running, 0 dead\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_job_fails_the_check() {
    let db = Db::migrated().await;
    db.insert(2, "send_email", "email", "dead").await;
    db.insert(1, "resize", "default", "ready").await;
    let run = db.jobs(&["check"]).await.failed_check();
    assert_eq!(
        run.stdout,
        "dead: 2 dead jobs of kind send_email in queue email (at most 0 allowed)\n"
    );
    // The threshold is a flag.
    assert_check_passes(&db, &["--max-dead", "2"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_job_waiting_too_long_fails_the_check() {
    let db = Db::migrated().await;
    let ids = db.insert(3, "send_email", "email", "ready").await;
    backdate(&db, &ids[..1], &["run_at", "created_at"], "10 minutes").await;
    // A live worker can claim them: they are late, not unserved.
    live_worker(&db, &["email"], &["send_email"]).await;
    let run = db.jobs(&["check"]).await.failed_check();
    assert_framed(
        run.single_line(),
        "ready_age: the oldest of 3 ready jobs of kind send_email in queue email has waited 10m",
        "(at most 5m allowed)",
    );
    assert_check_passes(&db, &["--max-ready-age", "15m"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_nobody_rescues_fails_the_check() {
    let db = Db::migrated().await;
    let ids = db.insert(1, "resize", "default", "running").await;
    backdate(&db, &ids, &["lease_expires_at"], "3 minutes").await;
    let run = db.jobs(&["check"]).await.failed_check();
    assert!(
        run.stdout.starts_with(
            "expired_leases: 1 running job of kind resize in queue default with an expired lease, the oldest expired 3m"
        ),
        "{run:?}"
    );
    assert_check_passes(&db, &["--max-expired-lease-age", "10m"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_threshold_crossed_gets_its_line() {
    let db = Db::migrated().await;
    db.insert(1, "send_email", "email", "dead").await;
    db.insert(4, "resize", "default", "dead").await;
    let ready = db.insert(1, "resize", "default", "ready").await;
    backdate(&db, &ready, &["run_at"], "1 hour").await;
    live_worker(&db, &["default"], &["resize"]).await;
    let run = db.jobs(&["check"]).await.failed_check();
    let names: Vec<&str> = run
        .stdout
        .lines()
        .map(|line| line.split(':').next().unwrap_or_default())
        .collect();
    assert_eq!(names, ["dead", "ready_age", "dead"], "{run:?}");
    assert!(run.stdout.contains("4 dead jobs of kind resize"), "{run:?}");
    assert!(
        run.stdout.contains("1 dead job of kind send_email"),
        "{run:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_without_a_success_for_two_periods_fails_the_check() {
    let db = Db::migrated().await;
    // Both registered 10 minutes ago, ticking every minute; one succeeded 30 s ago, the other
    // never did.
    let every_minute = Schedule {
        description: "every 1m",
        registered_ago: "10 minutes",
        ..Schedule::default()
    };
    Schedule {
        name: "nightly_report",
        kind: "build_report",
        queue: "reports",
        ..every_minute
    }
    .insert(&db)
    .await;
    Schedule {
        name: "heartbeat",
        kind: "ping",
        succeeded_ago: Some("30 seconds"),
        ..every_minute
    }
    .insert(&db)
    .await;
    let run = db.jobs(&["check"]).await.failed_check();
    assert_framed(
        run.single_line(),
        "schedule_missing: schedule nightly_report (kind build_report, every 1m) has missed ",
        "runs in a row (no success since it was registered): \
         are its jobs failing, or is no worker scheduling it?",
    );
    let stats = db.jobs(&["stats"]).await.success();
    assert!(stats.stdout.contains("SCHEDULE"), "{stats:?}");
    assert!(stats.stdout.contains("nightly_report"), "{stats:?}");
    // The grace is a flag: with an hour, the last ten ticks are still within it.
    assert_check_passes(&db, &["--schedule-grace", "1h"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_schedule_is_no_longer_checked() {
    let db = Db::migrated().await;
    Schedule {
        name: "retired",
        kind: "old_report",
        description: "every 1m",
        registered_ago: "1 hour",
        ticked_ago: "1 hour",
        ..Schedule::default()
    }
    .insert(&db)
    .await;
    assert_eq!(db.jobs(&["check"]).await.code, 1);
    let removed = db.jobs(&["schedule", "remove", "retired"]).await.success();
    assert_eq!(removed.stdout, "removed schedule retired; its jobs stay\n");
    assert_check_passes(&db, &[]).await;
    let again = db.jobs(&["schedule", "remove", "retired"]).await.success();
    assert_eq!(again.stdout, "no schedule named retired: nothing removed\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_schedule_still_kept_up_with_needs_force() {
    let db = Db::migrated().await;
    Schedule {
        kind: "build_report",
        description: "cron 0 3 * * * in UTC",
        registered_ago: "3 days",
        ticked_ago: "1 hour",
        ..Schedule::default()
    }
    .insert(&db)
    .await;
    let run = db.jobs(&["schedule", "remove", "nightly"]).await;
    assert_eq!(run.code, 2, "{run:?}");
    let line = run.one_line_error();
    assert!(
        line.contains("schedule nightly is still kept up with"),
        "{line}"
    );
    assert!(line.contains("--force"), "{line}");
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_schedules WHERE name = 'nightly'")
            .await,
        1
    );
    let removed = db
        .jobs(&["schedule", "remove", "nightly", "--force"])
        .await
        .success();
    assert_eq!(removed.stdout, "removed schedule nightly; its jobs stay\n");
    assert_eq!(db.count("SELECT count(*) FROM jobs_schedules").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn due_jobs_no_live_worker_can_claim_fail_the_check() {
    let db = Db::migrated().await;
    let ids = db.insert(2, "send_email", "email", "ready").await;
    backdate(&db, &ids, &["run_at"], "3 minutes").await;
    let nobody = db.jobs(&["check"]).await.failed_check();
    assert_framed(
        nobody.single_line(),
        "queue_unserved: no live worker claims from queue email, where the oldest of 2 ready jobs has waited 3m",
        "(at most 1m allowed): start a worker that runs this queue",
    );
    live_worker(&db, &["email"], &["send_sms"]).await;
    let kind_missing = db.jobs(&["check"]).await.failed_check();
    assert_framed(
        kind_missing.single_line(),
        "kind_without_worker: no live worker of queue email runs kind send_email, whose oldest of 2 ready jobs has waited 3m",
        "(at most 1m allowed): deploy a worker that registers it",
    );
    // The threshold is a flag.
    assert_check_passes(&db, &["--max-unserved-age", "10m"]).await;
    live_worker(&db, &["email"], &["send_email"]).await;
    assert_check_passes(&db, &[]).await;
}
