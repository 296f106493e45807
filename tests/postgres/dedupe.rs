//! Dedupe keys: a second enqueue returns the first job's id, inside the same transaction,
//! without aborting it.

use std::time::Instant;

use jobs::postgres::__private::sql;
use jobs::Enqueued;

use crate::plans::{
    assert_no_seq_scan, assert_reads_just, explain, explain_analyze, indexes_read, plan_nodes,
    plan_of, scans_of,
};
use crate::support::Db;
use crate::test_jobs::{send_receipt, sync_user};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dedupe_hit_returns_the_first_id_and_the_transaction_still_commits() {
    let db = Db::new().await;
    db.execute("CREATE TABLE orders (id bigint PRIMARY KEY)")
        .await;
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
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE dedupe_key = 'receipt:1042'")
            .await,
        1
    );

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
    db.run_until(&["send_receipt"], first, "done").await;
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
    db.run_until(&["sync_user"], first, "done").await;
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
    db.wait_for_count_at_least(
        "the second enqueue to block on the first",
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
        1,
    )
    .await;
    first_tx.commit().await.unwrap();
    assert_eq!(second.await.unwrap(), Enqueued::Duplicate(first.id()));
}

/// Whether some node reads `index` with the key's digest in its index condition (rather than
/// walking every entry of a kind and filtering by key).
fn probes_by_digest(nodes: &[serde_json::Value], index: &str) -> bool {
    nodes.iter().any(|node| {
        node["Index Name"] == index
            && node["Index Cond"]
                .as_str()
                .is_some_and(|condition| condition.contains("sha256"))
    })
}

/// A million keyed rows: half hold `retained` keys, half `active` keys, of which 100,000 are
/// still pending (ready in the future) and hold them; the rest are done, some dead.
async fn insert_a_million_keyed_rows(db: &Db) {
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, run_at,
                                 finished_at, dedupe_key, dedupe_scope)
         SELECT CASE WHEN n % 2 = 0 THEN 'send_receipt' ELSE 'sync_user' END,
                'default', '{}'::jsonb, state, 1, 8, now() + interval '1 day',
                CASE WHEN state = 'ready' THEN NULL ELSE now() END,
                CASE WHEN n % 2 = 0 THEN 'receipt:' ELSE 'sync:' END || (n + 1000000),
                CASE WHEN n % 2 = 0 THEN 'retained' ELSE 'active' END
         FROM generate_series(1, 1000000) AS n,
              LATERAL (SELECT CASE WHEN n % 1000 = 1 THEN 'dead'
                                   WHEN n % 10 = 3 THEN 'ready'
                                   ELSE 'done' END AS state) AS row_state",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_on_a_million_keyed_rows_is_found_through_the_dedupe_indexes() {
    let db = Db::new().await;
    insert_a_million_keyed_rows(&db).await;
    let retained = send_receipt::enqueue(&db.pool, 1).await.unwrap();
    let active = sync_user::enqueue(&db.pool, 2).await.unwrap();
    db.execute("ANALYZE jobs_queue").await;

    let find_holders = explain_analyze(sql::FIND_DEDUPE_HOLDERS);
    let query = sqlx::query_scalar(&find_holders)
        .bind(vec!["send_receipt", "sync_user"])
        .bind(vec!["receipt:1", "sync:2"]);
    let plan = plan_of(&db, "dedupe holder lookup on 1,000,000 keyed rows", query).await;
    let nodes = plan_nodes(&plan);
    assert_no_seq_scan(&scans_of(&nodes, "jobs_queue"), "the dedupe holder lookup");
    assert_reads_just(
        &indexes_read(&nodes),
        &["jobs_queue_dedupe_retained", "jobs_queue_dedupe_active"],
    );
    assert!(
        probes_by_digest(&nodes, "jobs_queue_dedupe_active"),
        "the active index is probed by key digest, not walked for the kind"
    );

    let mut times = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        let again = send_receipt::enqueue(&db.pool, 1).await.unwrap();
        times.push(started.elapsed());
        assert_eq!(again, Enqueued::Duplicate(retained.id()));
    }
    assert_eq!(
        sync_user::enqueue(&db.pool, 2).await.unwrap(),
        Enqueued::Duplicate(active.id())
    );
    times.sort();
    println!(
        "duplicate enqueue on 1,000,000 keyed rows: median {:?}, slowest {:?} (20 runs)",
        times[times.len() / 2],
        times[times.len() - 1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_dead_jobs_on_a_million_keyed_rows_looks_holders_up_through_the_active_index() {
    let db = Db::new().await;
    insert_a_million_keyed_rows(&db).await;
    db.execute("ANALYZE jobs_queue").await;
    let replay = explain(sql::REPLAY_DEAD);
    let query = sqlx::query_scalar(&replay)
        .bind(None::<Vec<i64>>)
        .bind(Some("sync_user"))
        .bind(None::<String>)
        .bind(None::<f64>)
        .bind(0_i64)
        .bind(100_i64);
    let plan = plan_of(&db, "dead-job replay on 1,000,000 keyed rows", query).await;
    let scans = scans_of(&plan_nodes(&plan), "jobs_queue");
    assert_no_seq_scan(&scans, "the dead-job replay");
    assert!(
        probes_by_digest(&plan_nodes(&plan), "jobs_queue_dedupe_active"),
        "the holder of an active key is found by its digest in the active index: {scans:?}"
    );
}
