//! Triggering a schedule: one extra run now, with the settings its workers registered, its
//! ticks untouched.

use std::time::Duration;

use chrono::{DateTime, Utc};
use jobs::admin::{self, AdminError, Trigger};
use jobs::{Schedule, Worker};

use crate::support::{fast_config, wait_until, Db};

/// The schedule's last tick dealt with and last success.
async fn schedule_row(db: &Db, name: &str) -> (DateTime<Utc>, Option<DateTime<Utc>>) {
    sqlx::query_as("SELECT last_tick_at, last_success_at FROM jobs_schedules WHERE name = $1")
        .bind(name)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_runs_the_schedule_once_now_and_leaves_its_ticks_alone() {
    let db = Db::new().await;
    let daily = Schedule::every("tick", Duration::from_secs(86_400)).unwrap();
    let name = daily.name().to_string();
    let worker = Worker::builder(db.pool.clone())
        .kinds(["tick"])
        .state(db.pool.clone())
        .schedule(daily)
        .config(fast_config())
        .build()
        .unwrap()
        .start();
    wait_until("the schedule to be registered", || async {
        db.count("SELECT count(*) FROM jobs_schedules WHERE max_attempts IS NOT NULL")
            .await
            == 1
    })
    .await;
    let (last_tick, never) = schedule_row(&db, &name).await;
    assert_eq!(never, None);

    let Trigger::Enqueued { id } = admin::trigger_schedule(&db.pool, &name).await.unwrap() else {
        panic!("the schedule exists and is registered");
    };
    let row = db.wait_for_state(id, "done").await;
    assert_eq!((row.kind.as_str(), row.max_attempts), ("tick", 1));
    let (still, success) = schedule_row(&db, &name).await;
    assert_eq!(still, last_tick, "the ticks are untouched");
    assert!(
        success.is_some(),
        "the run counts as the schedule's success"
    );

    // Each trigger is one more run.
    let again = admin::trigger_schedule(&db.pool, &name).await.unwrap();
    let Trigger::Enqueued { id: second } = again else {
        panic!("{again:?}");
    };
    assert_ne!(second, id);
    db.wait_for_state(second, "done").await;
    assert_eq!(db.count("SELECT count(*) FROM runs").await, 2);
    worker.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_unknown_or_unregistered_schedule_is_reported_and_nothing_is_enqueued() {
    let db = Db::new().await;
    assert_eq!(
        admin::trigger_schedule(&db.pool, "nightly").await.unwrap(),
        Trigger::NotFound
    );
    // A row as an older version registered it: no job settings.
    sqlx::query(
        "INSERT INTO jobs_schedules (name, kind, queue, description, missed, last_tick_at)
         VALUES ('nightly', 'tick', 'default', 'every 1d', 'skip', now())",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        admin::trigger_schedule(&db.pool, "nightly").await.unwrap(),
        Trigger::SettingsUnknown
    );
    assert!(matches!(
        admin::trigger_schedule(&db.pool, "night\0ly").await,
        Err(AdminError::InvalidText { .. })
    ));
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue").await, 0);
}
