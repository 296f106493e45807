//! `jobs schedule trigger`: one run now, with the settings the workers registered.

use crate::support::Db;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_enqueues_one_run_with_the_registered_settings() {
    let db = Db::migrated().await;
    db.execute(
        "INSERT INTO jobs_schedules (name, kind, queue, description, missed, priority,
                                     max_attempts, last_tick_at)
         VALUES ('nightly', 'report', 'reports', 'every 1d', 'skip', 5, 3, now());
         INSERT INTO jobs_schedules (name, kind, queue, description, missed, last_tick_at)
         VALUES ('legacy', 'report', 'reports', 'every 1d', 'skip', now())",
    )
    .await;
    let run = db.jobs(&["schedule", "trigger", "nightly"]).await.success();
    let id = db
        .count("SELECT id FROM jobs_queue WHERE kind = 'report' AND queue = 'reports' AND priority = 5 AND max_attempts = 3 AND schedule = 'nightly' AND run_at <= now()")
        .await;
    assert_eq!(
        run.stdout,
        format!("enqueued job {id}, a run of schedule nightly due now; its ticks are untouched\n")
    );

    let missing = db.jobs(&["schedule", "trigger", "weekly"]).await;
    assert_eq!(
        missing.one_line_error(),
        "jobs: no schedule named weekly: `jobs stats` lists the schedules"
    );
    let legacy = db.jobs(&["schedule", "trigger", "legacy"]).await;
    assert!(
        legacy
            .one_line_error()
            .contains("registered by an older version"),
        "the row holds no job settings"
    );
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue").await, 1);
}
