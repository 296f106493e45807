//! Claims cost what the jobs they can take cost, not what other kinds' backlog costs: with
//! 200,000 due jobs of a kind the worker does not run ranking ahead of its own (a rolling
//! deploy, workers of different kinds on one queue), each claim statement reads a few index
//! pages and filters no foreign row. Each test prints the plan it checks.

use chrono::{DateTime, Utc};
use jobs::postgres::__private::sql;
use serde_json::Value;
use sqlx::postgres::PgArguments;
use sqlx::query::QueryScalar;
use sqlx::Postgres;

use crate::plans::{
    assert_no_seq_scan, claim_of_16, explain_analyze, plan_nodes, plan_of, scans_of,
};
use crate::support::Db;

/// Foreign jobs among the worker's own, every 30 ms over the same 100 minutes, half of them at a
/// higher priority (ranking ahead of all the worker's jobs), half at the same priority
/// (between each two of the worker's jobs).
const FOREIGN: i64 = 200_000;
/// Most buffers a claim of 16 jobs may touch in all (its scans, and the updates of the rows).
const MAX_BUFFERS: i64 = 600;
/// Most rows a claim may read and throw away.
const MAX_REMOVED: i64 = 100;

/// A database with the foreign backlog and 100 due jobs of `record_run` in `default`, one a
/// minute.
async fn backlog_of_another_kind() -> Db {
    let db = Db::new().await;
    db.execute(&format!(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, priority, run_at)
         SELECT 'foreign_kind', 'default', '{{}}', 8, CASE WHEN n % 2 = 0 THEN 5 ELSE 0 END,
                now() - interval '2 hours' + n * interval '30 ms'
         FROM generate_series(1, {FOREIGN}) AS n"
    ))
    .await;
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, run_at)
         SELECT 'record_run', 'default', '{\"label\": \"x\"}', 8,
                now() - interval '2 hours' + n * interval '1 minute'
         FROM generate_series(1, 100) AS n",
    )
    .await;
    db.execute("VACUUM ANALYZE jobs_queue").await;
    db
}

/// Runs `explain` (an [`explain_analyze`] of a claim, its parameters bound) and rolls it back,
/// prints the plan, and checks it; returns the rows the claim took.
async fn check(db: &Db, name: &str, explain: QueryScalar<'_, Postgres, Value, PgArguments>) -> i64 {
    let plan = plan_of(db, name, explain).await;
    let nodes = plan_nodes(&plan);
    assert_no_seq_scan(&scans_of(&nodes, "jobs_queue"), name);
    let removed: i64 = nodes
        .iter()
        .map(|node| node["Rows Removed by Filter"].as_i64().unwrap_or(0))
        .sum();
    let root = &plan[0]["Plan"];
    let buffers =
        root["Shared Hit Blocks"].as_i64().unwrap() + root["Shared Read Blocks"].as_i64().unwrap();
    println!("{name}: {buffers} buffers, {removed} rows removed by filters");
    assert!(
        removed <= MAX_REMOVED,
        "{name} threw away {removed} rows (foreign jobs walked)"
    );
    assert!(
        buffers <= MAX_BUFFERS,
        "{name} touched {buffers} buffers (foreign jobs walked)"
    );
    root["Actual Rows"].as_i64().unwrap()
}

/// [`check`]s `statement` (printed as `name`), a claim from the front of up to 16 jobs of
/// `kinds`; returns the rows it took.
async fn check_claim_from_the_front(
    db: &Db,
    name: &str,
    statement: &str,
    kinds: &[&'static str],
) -> i64 {
    let explain = explain_analyze(statement);
    check(db, name, claim_of_16(&explain, kinds)).await
}

/// [`check`]s `statement` (printed as `name`), a claim of up to 16 jobs of `kinds` from the
/// last place, resuming after the eleventh due `record_run` job; returns the rows it took.
async fn check_claim_from_the_last_place(
    db: &Db,
    name: &str,
    statement: &str,
    kinds: &[&'static str],
) -> i64 {
    let (run_at, id): (DateTime<Utc>, i64) = sqlx::query_as(
        "SELECT run_at, id FROM jobs_queue WHERE kind = 'record_run' ORDER BY run_at, id LIMIT 1 OFFSET 10",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let explain = explain_analyze(statement);
    let query = claim_of_16(&explain, kinds)
        .bind(0_i16)
        .bind(run_at)
        .bind(id);
    check(db, name, query).await
}

/// [`check`]s the claim of a kind limited in its running jobs, as a worker claims up to 16
/// `record_run` jobs from queues `default` and `other`, 100 of them allowed to run, with 30 s
/// leases; returns the rows it took.
async fn check_limited_claim(db: &Db) -> i64 {
    let explain = explain_analyze(sql::CLAIM_LIMITED_JOBS);
    let query = sqlx::query_scalar(&explain)
        .bind("record_run")
        .bind(vec!["default".to_string(), "other".to_string()])
        .bind(16_i64)
        .bind(100_i64)
        .bind(30.0_f64);
    check(db, "CLAIM_LIMITED_JOBS", query).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_from_the_front_skips_other_kinds_backlog() {
    let db = backlog_of_another_kind().await;
    let kinds = ["record_run", "bad_input"];
    let taken = check_claim_from_the_front(&db, "CLAIM_JOBS", sql::CLAIM_JOBS, &kinds).await;
    assert_eq!(taken, 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_from_the_last_place_skips_other_kinds_backlog() {
    let db = backlog_of_another_kind().await;
    let kinds = ["record_run", "bad_input"];
    let statement = sql::CLAIM_JOBS_AFTER;
    let taken = check_claim_from_the_last_place(&db, "CLAIM_JOBS_AFTER", statement, &kinds).await;
    assert_eq!(taken, 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_one_kind_skips_other_kinds_backlog() {
    let db = backlog_of_another_kind().await;
    let kinds = ["record_run"];
    let statement = sql::CLAIM_ONE_KIND;
    let taken = check_claim_from_the_front(&db, "CLAIM_ONE_KIND", statement, &kinds).await;
    assert_eq!(taken, 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_one_kind_from_the_last_place_skips_other_kinds_backlog() {
    let db = backlog_of_another_kind().await;
    let kinds = ["record_run"];
    let statement = sql::CLAIM_ONE_KIND_AFTER;
    let name = "CLAIM_ONE_KIND_AFTER";
    let taken = check_claim_from_the_last_place(&db, name, statement, &kinds).await;
    assert_eq!(taken, 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_claim_skips_other_kinds_backlog() {
    let db = backlog_of_another_kind().await;
    assert_eq!(check_limited_claim(&db).await, 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_claim_reads_only_what_it_takes_of_its_own_backlog() {
    let db = Db::new().await;
    db.execute(&format!(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, run_at)
         SELECT 'record_run', CASE WHEN n % 2 = 0 THEN 'default' ELSE 'other' END,
                '{{\"label\": \"x\"}}', 8, now() - interval '2 hours' + n * interval '30 ms'
         FROM generate_series(1, {FOREIGN}) AS n"
    ))
    .await;
    db.execute("VACUUM ANALYZE jobs_queue").await;
    assert_eq!(check_limited_claim(&db).await, 16);
}
