//! Migrations, and the plan of the claim query.

use crate::support::{plan_nodes, scans_of, Db};
use jobs::postgres::sql;
use jobs::postgres::testing::TestDatabase;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_are_safe_to_run_from_many_processes_at_once() {
    let database = TestDatabase::create().await.unwrap();
    let mut runs = Vec::new();
    for _ in 0..6 {
        let pool = database.pool(2).await.unwrap();
        runs.push(tokio::spawn(async move { jobs::migrate(&pool).await }));
    }
    let mut applied = Vec::new();
    for run in runs {
        applied.extend(run.await.unwrap().unwrap().applied);
    }
    let all: Vec<i32> = jobs::postgres::migrate::MIGRATIONS
        .iter()
        .map(|migration| migration.version)
        .collect();
    assert_eq!(applied, all, "each migration applied exactly once");
    let pool = database.pool(1).await.unwrap();
    assert!(jobs::migrate(&pool).await.unwrap().applied.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_history_is_kept_apart_from_the_applications() {
    let db = Db::new().await;
    let history: Vec<(i32, String)> =
        sqlx::query_as("SELECT version, name FROM jobs_migrations ORDER BY version")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        history,
        vec![
            (1, "jobs_queue".to_string()),
            (2, "operating".to_string()),
            (3, "processed_keys".to_string()),
            (4, "schedules".to_string()),
            (5, "outbox".to_string()),
            (6, "claims_and_gauges".to_string())
        ]
    );
    let sqlx_history: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations')::text")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(sqlx_history, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claiming_never_walks_done_or_dead_rows() {
    let db = Db::new().await;
    sqlx::query(
        "INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, finished_at)
         SELECT 'record_run', 'default', '{}'::jsonb,
                CASE WHEN n % 10 = 0 THEN 'dead' ELSE 'done' END, 1, 8, now()
         FROM generate_series(1, 50000) AS n",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts)
         SELECT 'record_run', 'default', '{}'::jsonb, 8 FROM generate_series(1, 20)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE jobs_queue")
        .execute(&db.pool)
        .await
        .unwrap();

    let explain = format!("EXPLAIN (FORMAT JSON) {}", sql::CLAIM_JOBS);
    let plan: serde_json::Value = sqlx::query_scalar(&explain)
        .bind("default")
        .bind(vec!["record_run"])
        .bind(16_i64)
        .bind(vec![30.0_f64])
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let nodes = plan_nodes(&plan);
    let scans: Vec<(String, String)> = scans_of(&nodes, "jobs_queue");
    assert!(
        scans.iter().any(|(_, index)| index == "jobs_queue_ready"),
        "the claim must find candidates through the ready-only index: {scans:?}"
    );
    assert!(
        scans.iter().all(|(node, _)| node != "Seq Scan"),
        "the claim must not scan the table: {scans:?}"
    );
}
