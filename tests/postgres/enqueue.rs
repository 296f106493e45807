//! Enqueue happens in the caller's transaction.

use std::time::{Duration, SystemTime};

use jobs::Enqueued;

use crate::support::Db;
use crate::test_jobs::{record_run, send_receipt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_transaction_leaves_no_job() {
    let db = Db::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    let enqueued = record_run::enqueue_in(&mut tx, "gone".into())
        .await
        .unwrap();
    assert!(enqueued.is_new());
    tx.rollback().await.unwrap();
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_job_is_visible_only_after_commit() {
    let db = Db::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    let id = record_run::enqueue_in(&mut tx, "kept".into())
        .await
        .unwrap()
        .id();
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue").await, 0);
    tx.commit().await.unwrap();
    let job = db.job(id).await;
    assert_eq!(
        (job.kind.as_str(), job.state.as_str(), job.attempts),
        ("record_run", "ready", 0)
    );
    assert_eq!(job.max_attempts, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builder_sets_delay_run_at_priority_and_queue() {
    let db = Db::new().await;
    let delayed = record_run::builder("later".into())
        .delay(Duration::from_secs(600))
        .priority(7)
        .queue("slow")
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    let at = record_run::builder("tomorrow".into())
        .run_at(SystemTime::now() + Duration::from_secs(86_400))
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    let queue: String = db.job_value(delayed, "queue").await;
    let priority: i16 = db.job_value(delayed, "priority").await;
    assert_eq!((queue.as_str(), priority), ("slow", 7));
    let delayed = db.job(delayed).await.ready_in_secs;
    assert!((590.0..=600.0).contains(&delayed), "{delayed}");
    let at = db.job(at).await.ready_in_secs;
    assert!((86_390.0..=86_400.0).contains(&at), "{at}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_enqueue_writes_every_job_in_order_in_one_transaction() {
    let db = Db::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    let args = (0..500).map(|n| record_run::Args {
        label: format!("job-{n}"),
    });
    let results = record_run::enqueue_many_in(&mut tx, args).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(results.len(), 500);
    assert!(results.iter().all(|result| result.is_new()));
    let labels: Vec<(i64, String)> = db
        .rows("SELECT id, payload->>'label' FROM jobs_queue ORDER BY id")
        .await;
    for (position, (result, (id, label))) in results.iter().zip(&labels).enumerate() {
        assert_eq!(result.id(), *id);
        assert_eq!(label, &format!("job-{position}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_enqueue_applies_dedupe_per_row() {
    let db = Db::new().await;
    let existing = send_receipt::enqueue(&db.pool, 1).await.unwrap().id();
    let args = [1, 2, 2, 3].map(|order_id| send_receipt::Args { order_id });
    let results = send_receipt::enqueue_many(&db.pool, args).await.unwrap();
    assert_eq!(results[0], Enqueued::Duplicate(existing));
    assert!(results[1].is_new());
    assert_eq!(results[2], Enqueued::Duplicate(results[1].id()));
    assert!(results[3].is_new());
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue").await, 3);
}

/// A session watching `queues` as an idle worker does (enqueue announces ready work only in
/// queues a worker watches), for as long as it is kept.
async fn watch(db: &Db, queues: &[&str]) -> sqlx::PgConnection {
    use sqlx::Connection;
    let mut session = sqlx::PgConnection::connect(db.url()).await.unwrap();
    for queue in queues {
        sqlx::query(jobs::postgres::__private::sql::WATCH_QUEUE)
            .bind(queue)
            .execute(&mut session)
            .await
            .unwrap();
    }
    session
}

/// A connection listening on the channel enqueue announces ready work on.
async fn listen(db: &Db) -> sqlx::postgres::PgListener {
    let mut listener = sqlx::postgres::PgListener::connect_with(&db.pool)
        .await
        .unwrap();
    listener
        .listen(jobs::postgres::__private::sql::NOTIFY_CHANNEL)
        .await
        .unwrap();
    listener
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_announces_ready_work_but_not_delayed_work() {
    let db = Db::new().await;
    let _watching = watch(&db, &["default", "marker"]).await;
    let mut listener = listen(&db).await;
    let args = (0..50).map(|n| record_run::Args {
        label: n.to_string(),
    });
    record_run::enqueue_many(&db.pool, args).await.unwrap();
    let notification = listener.recv().await.unwrap();
    assert_eq!(notification.payload(), "default");
    // A delayed job announces nothing; the next notification is the one after it.
    record_run::builder("later".into())
        .delay(Duration::from_secs(60))
        .enqueue(&db.pool)
        .await
        .unwrap();
    record_run::builder("marker".into())
        .queue("marker")
        .enqueue(&db.pool)
        .await
        .unwrap();
    let notification = listener.recv().await.unwrap();
    assert_eq!(notification.payload(), "marker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_of_mixed_shapes_keeps_each_jobs_options_and_order() {
    let db = Db::new().await;
    let shapes = [
        record_run::builder("plain".into()),
        record_run::builder("urgent".into()).priority(9),
        record_run::builder("elsewhere".into()).queue("slow"),
        record_run::builder("later".into()).delay(Duration::from_secs(600)),
        record_run::builder("plain again".into()),
    ];
    let jobs: Vec<_> = shapes
        .into_iter()
        .map(|builder| builder.into_new_job().unwrap())
        .collect();
    let mut conn = db.pool.acquire().await.unwrap();
    let results = jobs::enqueue_jobs(&mut conn, &jobs).await.unwrap();
    let rows: Vec<(i64, String, String, i16, bool)> = db
        .rows(
            "SELECT id, payload->>'label', queue, priority, run_at > now() + interval '500 seconds'
         FROM jobs_queue ORDER BY id",
        )
        .await;
    let ids: Vec<i64> = results.iter().map(|result| result.id()).collect();
    assert_eq!(ids, rows.iter().map(|row| row.0).collect::<Vec<_>>());
    let written: Vec<(&str, &str, i16, bool)> = rows
        .iter()
        .map(|(_, label, queue, priority, later)| {
            (label.as_str(), queue.as_str(), *priority, *later)
        })
        .collect();
    assert_eq!(
        written,
        [
            ("plain", "default", 0, false),
            ("urgent", "default", 9, false),
            ("elsewhere", "slow", 0, false),
            ("later", "default", 0, true),
            ("plain again", "default", 0, false),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_announces_each_ready_queue_once_and_no_delayed_queue() {
    let db = Db::new().await;
    let _watching = watch(&db, &["first", "second", "delayed", "marker"]).await;
    let mut listener = listen(&db).await;
    let new_job = |label: &str, queue: &str, delay_secs: u64| {
        record_run::builder(label.into())
            .queue(queue)
            .delay(Duration::from_secs(delay_secs))
            .into_new_job()
            .unwrap()
    };
    let mut conn = db.pool.acquire().await.unwrap();
    // All of one shape and delayed: nothing to announce.
    let delayed: Vec<_> = (0..20).map(|_| new_job("later", "delayed", 60)).collect();
    jobs::enqueue_jobs(&mut conn, &delayed).await.unwrap();
    // Mixed shapes: two ready queues, each announced once, and a delayed one not at all.
    let mixed = [
        new_job("a", "first", 0),
        new_job("b", "delayed", 60),
        new_job("c", "second", 0),
        new_job("d", "first", 0),
    ];
    jobs::enqueue_jobs(&mut conn, &mixed).await.unwrap();
    record_run::builder("marker".into())
        .queue("marker")
        .enqueue(&db.pool)
        .await
        .unwrap();
    let mut announced = Vec::new();
    loop {
        let notification = listener.recv().await.unwrap();
        if notification.payload() == "marker" {
            break;
        }
        announced.push(notification.payload().to_string());
    }
    announced.sort();
    assert_eq!(announced, ["first", "second"]);
}
