//! Retention: done and cancelled jobs past their age go, a batch per statement, one process at
//! a time; dead jobs and younger ones stay; workers do it by themselves.

use std::time::Duration;

use jobs::admin::{Retention, RetentionConfig};
use jobs::postgres::__private::sql;
use jobs::{Worker, WorkerConfig, WorkerError};

use jobs_testkit::RowState::{Cancelled, Dead, Done, Ready};
use jobs_testkit::{days, JobRow};

use crate::support::{fast_config, start_worker, wait_until, Db};

/// Old done and cancelled rows to delete, and rows that must stay; returns the count to delete.
async fn fill(db: &Db) -> i64 {
    let resize = |state| JobRow::new("resize").state(state);
    db.insert_all([
        resize(Done).count(2_450).finished_ago(days(8)),
        resize(Cancelled).count(50).finished_ago(days(8)),
        // Kept: dead whatever their age, finished recently, not finished.
        resize(Dead).count(3).finished_ago(days(8)),
        resize(Done).count(5).finished_ago(days(6)),
        resize(Ready).due_for(days(8)),
    ])
    .await;
    2_500
}

async fn states(db: &Db) -> Vec<(String, i64)> {
    db.rows("SELECT state, count(*) FROM jobs_queue GROUP BY state ORDER BY state")
        .await
}

fn kept() -> Vec<(String, i64)> {
    vec![
        ("dead".to_string(), 3),
        ("done".to_string(), 5),
        ("ready".to_string(), 1),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_once_deletes_one_batch_of_old_finished_jobs_and_never_dead_ones() {
    let db = Db::new().await;
    let old = fill(&db).await;
    let retention = Retention::new(db.pool.clone(), RetentionConfig::default()).unwrap();

    let mut deleted = Vec::new();
    loop {
        let report = retention.run_once().await.unwrap();
        assert!(!report.locked_elsewhere);
        assert!(report.deleted() <= 1_000, "one batch per run");
        deleted.push(report.deleted());
        if !report.more {
            break;
        }
    }
    assert_eq!(deleted, [1_000, 1_000, 500]);
    assert_eq!(deleted.iter().sum::<u64>(), old as u64);
    assert_eq!(states(&db).await, kept());
    assert_eq!(retention.run_once().await.unwrap().deleted(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_one_process_prunes_at_a_time() {
    let db = Db::new().await;
    fill(&db).await;
    let retention = Retention::new(db.pool.clone(), RetentionConfig::default()).unwrap();

    // Another process is pruning: it holds the lock for its transaction.
    let mut other = db.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(sql::RETENTION_LOCK_KEY)
        .execute(&mut *other)
        .await
        .unwrap();
    let report = retention.run_once().await.unwrap();
    assert!(report.locked_elsewhere);
    assert_eq!((report.deleted(), report.more), (0, false));
    other.commit().await.unwrap();

    let report = retention.run_once().await.unwrap();
    assert!(!report.locked_elsewhere);
    assert_eq!(report.deleted(), 1_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_prune_by_themselves() {
    let db = Db::new().await;
    fill(&db).await;
    let config = WorkerConfig {
        retention: Some(RetentionConfig {
            max_age: Duration::from_secs(7 * 86_400),
            batch_size: 400,
            interval: Duration::from_millis(50),
            ..RetentionConfig::default()
        }),
        ..fast_config()
    };
    // Two workers: they take turns, and the result is the same.
    let first = start_worker(&db.pool, &["bad_input"], config.clone());
    let second = start_worker(&db.pool, &["bad_input"], config);
    wait_until("old finished jobs to be deleted", || {
        let db = &db;
        async move { states(db).await == kept() }
    })
    .await;
    first.shutdown().await.expect("the worker stops");
    second.shutdown().await.expect("the worker stops");
}

#[test]
fn retention_settings_are_checked_when_the_worker_is_built() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = runtime.enter();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .connect_lazy("postgres://nobody@127.0.0.1:1/none")
        .unwrap();
    let config = WorkerConfig {
        retention: Some(RetentionConfig {
            batch_size: 0,
            ..RetentionConfig::default()
        }),
        ..WorkerConfig::default()
    };
    let built = Worker::builder(pool.clone())
        .kinds(["bad_input"])
        .config(config)
        .build();
    match built {
        Err(WorkerError::Config(error)) => assert_eq!(error.setting, "retention.batch_size"),
        Err(other) => panic!("unexpected error: {other}"),
        Ok(_) => panic!("a zero batch must be refused"),
    }
    assert!(Retention::new(
        pool,
        RetentionConfig {
            interval: Duration::ZERO,
            ..RetentionConfig::default()
        }
    )
    .is_err());
    let defaults = RetentionConfig::default();
    assert_eq!(
        (defaults.max_age, defaults.batch_size, defaults.interval),
        (Duration::from_secs(604_800), 1_000, Duration::from_secs(60))
    );
}
