//! A claim commits without waiting for its WAL flush, for its own transaction alone: the
//! connection goes back to the pool as durable as it came, and nothing else is relaxed.

use std::time::Duration;

use jobs::postgres::__private::sql;
use jobs::postgres::__private::store;
use sqlx::{Connection, PgConnection};

use crate::support::Db;
use crate::test_jobs::enqueue_record_run;

const KINDS: [&str; 1] = ["record_run"];
const LEASES: [Duration; 1] = [Duration::from_secs(30)];

async fn synchronous_commit(conn: &mut PgConnection) -> String {
    sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(conn)
        .await
        .unwrap()
}

/// A fresh database holding one ready job to claim.
async fn with_one_ready_job() -> Db {
    let db = Db::new().await;
    enqueue_record_run(&db, "claimed").await;
    db
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_relaxes_the_commit_of_its_own_transaction_only() {
    let db = with_one_ready_job().await;
    let mut conn = PgConnection::connect(db.url()).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    let claimed = sqlx::query(sql::CLAIM_JOBS)
        .bind("default")
        .bind(&KINDS[..])
        .bind(10_i64)
        .bind(vec![30.0_f64])
        .bind(10_i64)
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(synchronous_commit(&mut tx).await, "off");
    tx.commit().await.unwrap();
    assert_eq!(synchronous_commit(&mut conn).await, "on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_is_durable_again_after_a_claim() {
    let db = with_one_ready_job().await;
    let pool = db.other_pool(1).await;
    let claimed = store::claim(&pool, "default", &KINDS, &LEASES, 10, None)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let mut conn = pool.acquire().await.unwrap();
    assert_eq!(synchronous_commit(&mut conn).await, "on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_claim_waits_for_its_flush() {
    let db = with_one_ready_job().await;
    let mut conn = PgConnection::connect(db.url()).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    sqlx::query(sql::LOCK_LIMITED_KIND)
        .bind("record_run")
        .execute(&mut *tx)
        .await
        .unwrap();
    let claimed = sqlx::query(sql::CLAIM_LIMITED_JOBS)
        .bind("record_run")
        .bind(vec!["default"])
        .bind(10_i64)
        .bind(1_i64)
        .bind(30.0_f64)
        .bind(None::<i32>)
        .bind(None::<f64>)
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(synchronous_commit(&mut tx).await, "on");
    tx.rollback().await.unwrap();
}
