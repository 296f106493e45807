//! One expired lease the database refuses to rescue holds back no other: the rescue falls back
//! to one row at a time and sets the refused row aside.

use jobs::postgres::__private::sql;

use crate::plans::{explain, plan_nodes, scans_of};
use crate::support::Db;
use crate::test_jobs::orphaned_record_run;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_the_database_refuses_to_rescue_holds_back_no_other() {
    let db = Db::new().await;
    // A rule of the application's: audited jobs may not go dead. The database refuses the
    // rescue of one that used up its attempts.
    db.execute(
        "ALTER TABLE jobs_queue ADD CONSTRAINT audited_jobs_never_die
         CHECK (state <> 'dead' OR payload->>'label' IS DISTINCT FROM 'audited')",
    )
    .await;
    // Expired first, so that it is in the rescue's first batch.
    let refused = orphaned_record_run(&db, "audited", 8).await;
    let ordinary = orphaned_record_run(&db, "ordinary", 1).await;
    let worker = db.start_worker(&["record_run"]);
    let job = db.wait_for_state(ordinary, "done").await;
    assert_eq!(job.attempts, 2);
    assert_eq!(job.errors.len(), 1);
    assert_eq!(job.errors[0].kind, "lease_expired");
    // Later sweeps still rescue, the refused row set aside.
    let later = orphaned_record_run(&db, "later", 1).await;
    let job = db.wait_for_state(later, "done").await;
    assert_eq!(job.attempts, 2);
    worker.shutdown().await.expect("the worker stops");
    let job = db.job(refused).await;
    assert_eq!(
        (job.state.as_str(), job.attempts),
        ("running", 8),
        "the refused row is left as it was"
    );
    assert!(job.errors.is_empty());
}

/// The rescue's statements find expired leases through the running-only index, however many
/// finished rows the table keeps, and the row-by-row rescue looks each job up by id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescue_statements_never_walk_finished_rows() {
    let db = Db::new().await;
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, finished_at)
         SELECT 'record_run', 'default', '{}'::jsonb, 'done', 1, 8, now()
         FROM generate_series(1, 100000) AS n",
    )
    .await;
    for n in 0..20 {
        orphaned_record_run(&db, &format!("orphan {n}"), 1).await;
    }
    db.execute("ANALYZE jobs_queue").await;
    let set_aside: Vec<i64> = vec![1, 2, 3];
    let mut plans = Vec::new();
    for (name, statement) in [("rescue", sql::RESCUE_EXPIRED), ("list", sql::LIST_EXPIRED)] {
        let plan: serde_json::Value = sqlx::query_scalar(&explain(statement))
            .bind(100_i64)
            .bind(&set_aside)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        plans.push((name, plan, "jobs_queue_leases"));
    }
    let plan: serde_json::Value = sqlx::query_scalar(&explain(sql::RESCUE_JOBS))
        .bind(vec![100_001_i64])
        .fetch_one(&db.pool)
        .await
        .unwrap();
    plans.push(("rescue one", plan, "jobs_queue_pkey"));
    for (name, plan, index) in plans {
        let scans = scans_of(&plan_nodes(&plan), "jobs_queue");
        println!("{name}: {scans:?}");
        assert!(
            scans.iter().any(|(_, used)| used == index),
            "{name} must go through {index}: {scans:?}"
        );
        assert!(
            scans.iter().all(|(node, _)| node != "Seq Scan"),
            "{name} must not scan the table: {scans:?}"
        );
    }
}
