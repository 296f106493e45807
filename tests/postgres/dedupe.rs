//! Dedupe keys: a second enqueue returns the first job's id, inside the same transaction,
//! without aborting it.

use jobs::Enqueued;

use crate::support::Db;
use crate::test_jobs::{send_receipt, sync_user};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dedupe_hit_returns_the_first_id_and_the_transaction_still_commits() {
    let db = Db::new().await;
    sqlx::query("CREATE TABLE orders (id bigint PRIMARY KEY)")
        .execute(&db.pool)
        .await
        .unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let first = send_receipt::enqueue_in(&mut tx, 1042).await.unwrap();
    let second = send_receipt::enqueue_in(&mut tx, 1042).await.unwrap();
    assert!(first.is_new());
    assert_eq!(second, Enqueued::Duplicate(first.id()));
    // The transaction is still usable after the duplicate, and commits.
    sqlx::query("INSERT INTO orders (id) VALUES (1042)")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(db.count("SELECT count(*) FROM orders").await, 1);
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue").await, 1);
    let key: String = sqlx::query_scalar("SELECT dedupe_key FROM jobs_queue")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(key, "receipt:1042");

    // Across transactions too.
    let third = send_receipt::enqueue(&db.pool, 1042).await.unwrap();
    assert_eq!(third, Enqueued::Duplicate(first.id()));
    assert!(send_receipt::enqueue(&db.pool, 1043)
        .await
        .unwrap()
        .is_new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retained_key_holds_after_the_job_is_done() {
    let db = Db::new().await;
    let first = send_receipt::enqueue(&db.pool, 7).await.unwrap().id();
    let worker = db.start_worker(&["send_receipt"]);
    db.wait_for_state(first, "done").await;
    worker.shutdown().await;
    assert_eq!(
        send_receipt::enqueue(&db.pool, 7).await.unwrap(),
        Enqueued::Duplicate(first)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_key_frees_up_when_the_job_is_done() {
    let db = Db::new().await;
    let first = sync_user::enqueue(&db.pool, 5).await.unwrap().id();
    assert_eq!(
        sync_user::enqueue(&db.pool, 5).await.unwrap(),
        Enqueued::Duplicate(first)
    );
    let worker = db.start_worker(&["sync_user"]);
    db.wait_for_state(first, "done").await;
    worker.shutdown().await;
    let again = sync_user::enqueue(&db.pool, 5).await.unwrap();
    assert!(again.is_new());
    assert_ne!(again.id(), first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transactions_with_the_same_key_write_one_job() {
    let db = Db::new().await;
    let mut first_tx = db.pool.begin().await.unwrap();
    let first = send_receipt::enqueue_in(&mut first_tx, 99).await.unwrap();
    let pool = db.pool.clone();
    // The second enqueue waits for the first transaction to settle, then sees its row.
    let second = tokio::spawn(async move { send_receipt::enqueue(&pool, 99).await.unwrap() });
    crate::support::wait_until("the second enqueue to block on the first", || {
        let pool = db.pool.clone();
        async move {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            waiting > 0
        }
    })
    .await;
    first_tx.commit().await.unwrap();
    assert_eq!(second.await.unwrap(), Enqueued::Duplicate(first.id()));
}
