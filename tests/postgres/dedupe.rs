//! Dedupe keys: a second enqueue returns the first job's id, inside the same transaction,
//! without aborting it.

use std::time::Instant;

use jobs::postgres::__private::sql;
use jobs::Enqueued;

use crate::support::{plan_nodes, scans_of, Db};
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
    worker.shutdown().await.expect("the worker stops");
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
    worker.shutdown().await.expect("the worker stops");
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
    sqlx::query(
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
    .execute(&db.pool)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_on_a_million_keyed_rows_is_found_through_the_dedupe_indexes() {
    let db = Db::new().await;
    insert_a_million_keyed_rows(&db).await;
    let retained = send_receipt::enqueue(&db.pool, 1).await.unwrap();
    let active = sync_user::enqueue(&db.pool, 2).await.unwrap();
    sqlx::query("ANALYZE jobs_queue")
        .execute(&db.pool)
        .await
        .unwrap();

    let kinds = vec!["send_receipt", "sync_user"];
    let keys = vec!["receipt:1", "sync:2"];
    let plan: serde_json::Value = sqlx::query_scalar(&format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) {}",
        sql::FIND_DEDUPE_HOLDERS
    ))
    .bind(&kinds)
    .bind(&keys)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    println!(
        "dedupe holder lookup on 1,000,000 keyed rows:\n{}",
        serde_json::to_string_pretty(&plan).unwrap()
    );
    let nodes = plan_nodes(&plan);
    let scans = scans_of(&nodes, "jobs_queue");
    assert!(
        scans.iter().all(|(node, _)| node != "Seq Scan"),
        "no sequential scan of the table: {scans:?}"
    );
    let indexes: Vec<&str> = nodes
        .iter()
        .filter_map(|node| node["Index Name"].as_str())
        .collect();
    let dedupe_indexes = ["jobs_queue_dedupe_retained", "jobs_queue_dedupe_active"];
    assert!(
        indexes.iter().all(|index| dedupe_indexes.contains(index)),
        "only the dedupe indexes are read: {indexes:?}"
    );
    for index in dedupe_indexes {
        assert!(indexes.contains(&index), "{index} not used: {indexes:?}");
    }
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
    sqlx::query("ANALYZE jobs_queue")
        .execute(&db.pool)
        .await
        .unwrap();
    let plan: serde_json::Value =
        sqlx::query_scalar(&format!("EXPLAIN (FORMAT JSON) {}", sql::REPLAY_DEAD))
            .bind(None::<Vec<i64>>)
            .bind(Some("sync_user"))
            .bind(None::<String>)
            .bind(None::<f64>)
            .bind(0_i64)
            .bind(100_i64)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    println!(
        "dead-job replay on 1,000,000 keyed rows:\n{}",
        serde_json::to_string_pretty(&plan).unwrap()
    );
    let scans = scans_of(&plan_nodes(&plan), "jobs_queue");
    assert!(
        scans.iter().all(|(node, _)| node != "Seq Scan"),
        "no sequential scan: {scans:?}"
    );
    assert!(
        probes_by_digest(&plan_nodes(&plan), "jobs_queue_dedupe_active"),
        "the holder of an active key is found by its digest in the active index: {scans:?}"
    );
}
