//! Claims resume where the last one ended: under a held xmin horizon, the entries of every job
//! claimed since pile up at the front of the ready index, and a claim from the front walks all
//! of them; a claim from the last place does not.

use std::time::Duration;

use jobs::postgres::sql;
use jobs::postgres::store::{self, ClaimPlace, Outcome};
use jobs::Decision;
use sqlx::Connection;

use crate::support::{plan_nodes, Db};

const KINDS: [&str; 1] = ["record_run"];
const LEASES: [Duration; 1] = [Duration::from_secs(30)];

/// Buffers (shared hits and reads) the scan of the ready index touched, in an analyzed plan.
fn buffers(plan: &serde_json::Value) -> i64 {
    let nodes = plan_nodes(plan);
    let scan = nodes
        .iter()
        .find(|node| node["Index Name"] == "jobs_queue_ready")
        .expect("a scan of the ready index");
    scan["Shared Hit Blocks"].as_i64().unwrap() + scan["Shared Read Blocks"].as_i64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_from_the_last_place_skips_what_a_held_xmin_keeps() {
    let db = Db::new().await;
    sqlx::query(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, run_at)
         SELECT 'record_run', 'default', '{\"label\": \"x\"}', 8, now() - interval '1 hour' + n * interval '1 ms'
         FROM generate_series(1, 6000) AS n",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query("VACUUM ANALYZE jobs_queue")
        .execute(&db.pool)
        .await
        .unwrap();
    // Another session's snapshot pins the xmin horizon: nothing claimed from now on can be
    // cleaned up, or even marked dead in the index.
    let mut holder = sqlx::PgConnection::connect(&db.url()).await.unwrap();
    sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut holder)
        .await
        .unwrap();
    sqlx::query("SELECT count(*) FROM jobs_queue")
        .execute(&mut holder)
        .await
        .unwrap();
    let mut last: Option<ClaimPlace> = None;
    for _ in 0..10 {
        let claimed = store::claim(&db.pool, "default", &KINDS, &LEASES, 500, last)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 500);
        last = claimed.iter().map(|job| job.place()).max();
        let outcomes: Vec<Outcome> = claimed
            .iter()
            .map(|job| Outcome {
                id: job.id,
                lease_token: job.lease_token,
                decision: Decision::Complete,
            })
            .collect();
        store::record_outcomes(&db.pool, &outcomes).await.unwrap();
    }
    let place = last.unwrap();
    let explain = |statement: &str| format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}");
    let mut transaction = db.pool.begin().await.unwrap();
    let from_front: serde_json::Value = sqlx::query_scalar(&explain(sql::CLAIM_JOBS))
        .bind("default")
        .bind(KINDS.to_vec())
        .bind(16_i64)
        .bind(vec![30.0_f64])
        .fetch_one(&mut *transaction)
        .await
        .unwrap();
    transaction.rollback().await.unwrap();
    let mut transaction = db.pool.begin().await.unwrap();
    let from_place: serde_json::Value = sqlx::query_scalar(&explain(sql::CLAIM_JOBS_AFTER))
        .bind("default")
        .bind(KINDS.to_vec())
        .bind(16_i64)
        .bind(vec![30.0_f64])
        .bind(place.priority)
        .bind(place.run_at)
        .bind(place.id)
        .fetch_one(&mut *transaction)
        .await
        .unwrap();
    transaction.rollback().await.unwrap();
    sqlx::query("COMMIT").execute(&mut holder).await.unwrap();
    let (front, resumed) = (buffers(&from_front), buffers(&from_place));
    println!("buffers for 16 jobs past 5,000 claimed under a held xmin: from the front {front}, from the last place {resumed}");
    assert!(
        resumed * 10 <= front,
        "from the front {front} buffers, from the last place {resumed}"
    );
}
