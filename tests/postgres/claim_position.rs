//! Claims resume where the last one ended: under a held xmin horizon, the entries of every job
//! claimed since pile up at the front of the ready index, and a claim from the front walks all
//! of them; a claim from the last place does not. A job that goes before that place (a higher
//! priority) is still claimed first.

use std::time::Duration;

use chrono::{DateTime, Utc};
use jobs::postgres::__private::sql;
use jobs::postgres::__private::store::{self, ClaimPlace, Outcome};
use jobs::{Decision, Worker, WorkerHandle};
use sqlx::Connection;

use crate::plans::{claim_of_16, explain_analyze, plan_nodes, plan_of};
use crate::support::{fast_config, Db};
use crate::test_jobs::insert_due_record_runs;

const KINDS: [&str; 1] = ["record_run"];
const LEASES: [Duration; 1] = [Duration::from_secs(30)];

/// Buffers (shared hits and reads) the scans of the ready index touched, in an analyzed plan.
fn buffers(plan: &serde_json::Value) -> i64 {
    let nodes = plan_nodes(plan);
    let scans: Vec<&serde_json::Value> = nodes
        .iter()
        .filter(|node| node["Index Name"] == "jobs_queue_ready")
        .collect();
    assert!(!scans.is_empty(), "a scan of the ready index");
    scans
        .iter()
        .map(|scan| {
            scan["Shared Hit Blocks"].as_i64().unwrap()
                + scan["Shared Read Blocks"].as_i64().unwrap()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_from_the_last_place_skips_what_a_held_xmin_keeps() {
    let db = Db::new().await;
    insert_due_record_runs(&db, 6_000, "x", "1 hour", "1 ms").await;
    db.execute("VACUUM ANALYZE jobs_queue").await;
    // Another session's snapshot pins the xmin horizon: nothing claimed from now on can be
    // cleaned up, or even marked dead in the index.
    let mut holder = sqlx::PgConnection::connect(db.url()).await.unwrap();
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
            .map(|job| {
                Outcome::of_run(job.id, job.lease_token, Decision::Complete { output: None })
            })
            .collect();
        store::record_outcomes(&db.pool, &outcomes).await.unwrap();
    }
    let place = last.unwrap();
    let claim = explain_analyze(sql::CLAIM_JOBS);
    let from_front = plan_of(&db, "CLAIM_JOBS", claim_of_16(&claim, &KINDS)).await;
    let claim_after = explain_analyze(sql::CLAIM_JOBS_AFTER);
    let query = claim_of_16(&claim_after, &KINDS)
        .bind(place.priority)
        .bind(place.run_at)
        .bind(place.id);
    let from_place = plan_of(&db, "CLAIM_JOBS_AFTER", query).await;
    sqlx::query("COMMIT").execute(&mut holder).await.unwrap();
    let (front, resumed) = (buffers(&from_front), buffers(&from_place));
    println!("buffers for 16 jobs past 5,000 claimed under a held xmin: from the front {front}, from the last place {resumed}");
    assert!(
        resumed * 10 <= front,
        "from the front {front} buffers, from the last place {resumed}"
    );
}

/// A worker with 8 slots draining the `record_run` backlog of `db`.
fn start_draining(db: &Db) -> WorkerHandle {
    Worker::builder(db.pool.clone())
        .kinds(["record_run"])
        .queue("default", 8)
        .state(db.pool.clone())
        .config(fast_config())
        .build()
        .expect("worker builds")
        .start()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higher_priority_jobs_enqueued_during_a_backlog_go_before_the_rest_of_it() {
    let db = Db::new().await;
    insert_due_record_runs(&db, 20_000, "backlog", "1 hour", "1 ms").await;
    let worker = start_draining(&db);
    // The backlog is being drained: claims resume where the previous one ended.
    db.wait_for_count_at_least(
        "part of the backlog to be done",
        "SELECT count(*) FROM jobs_queue WHERE state = 'done'",
        400,
    )
    .await;
    let urgent = 40;
    sqlx::query(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, priority)
         SELECT 'record_run', 'default', '{\"label\": \"urgent\"}', 8, 5
         FROM generate_series(1, $1)",
    )
    .bind(urgent)
    .execute(&db.pool)
    .await
    .unwrap();
    // Every claim that starts from now on sees the urgent jobs.
    let committed: DateTime<Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    db.wait_for_count(
        "the urgent jobs to be done",
        "SELECT count(*) FROM jobs_queue WHERE priority = 5 AND state = 'done'",
        urgent,
    )
    .await;
    worker.shutdown().await.expect("the worker stops");
    let backlog_left = db
        .count("SELECT count(*) FROM jobs_queue WHERE priority = 0 AND state = 'ready'")
        .await;
    assert!(
        backlog_left > 0,
        "the backlog ran out before the urgent jobs were claimed"
    );
    // No claim after the urgent jobs were committed took a backlog job while an urgent one was
    // left: backlog jobs claimed meanwhile share the claim of the last urgent ones, or came later.
    let overtaking: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM jobs_queue
         WHERE priority = 0 AND attempted_at > $1
           AND attempted_at < (SELECT max(attempted_at) FROM jobs_queue WHERE priority = 5)",
    )
    .bind(committed)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        overtaking, 0,
        "{overtaking} backlog jobs were claimed after the urgent jobs were committed and before the last of them"
    );
}

/// A job on its last attempt that goes before where the claims resume (rescued, or retried,
/// keeping its `run_at`) is claimed by the next look at the front, within about a second, while
/// a backlog drains: claims ahead of the free slots, which stop before such a job, never make
/// that look (they would take nothing and put the next look off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_on_its_last_attempt_before_the_place_is_claimed_by_the_next_look_at_the_front() {
    let db = Db::new().await;
    let backlog = 100_000;
    insert_due_record_runs(&db, backlog, "backlog", "1 hour", "1 ms").await;
    let worker = start_draining(&db);
    db.wait_for_count_at_least(
        "part of the backlog to be done",
        "SELECT count(*) FROM jobs_queue WHERE state = 'done'",
        2_000,
    )
    .await;
    let (last_attempt, committed): (i64, DateTime<Utc>) = sqlx::query_as(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, attempts, run_at)
         VALUES ('record_run', 'default', '{\"label\": \"last attempt\"}', 8, 7,
                 now() - interval '2 hours')
         RETURNING id, clock_timestamp()",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let left_then = db
        .count("SELECT count(*) FROM jobs_queue WHERE state = 'ready'")
        .await;
    db.wait_for_count(
        "the job on its last attempt to be claimed",
        &format!("SELECT count(*) FROM jobs_queue WHERE id = {last_attempt} AND state <> 'ready'"),
        1,
    )
    .await;
    worker.shutdown().await.expect("the worker stops");
    let claimed_before: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM jobs_queue
         WHERE attempted_at > $1 AND attempted_at < (SELECT attempted_at FROM jobs_queue WHERE id = $2)",
    )
    .bind(committed)
    .bind(last_attempt)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    println!(
        "{claimed_before} of the {left_then} backlog jobs ready were claimed before the job on its last attempt"
    );
    assert!(
        claimed_before < left_then / 2,
        "{claimed_before} of the {left_then} backlog jobs ready were claimed before the job on its last attempt"
    );
}
