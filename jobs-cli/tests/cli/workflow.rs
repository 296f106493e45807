//! Workflows on the command line: waiting jobs in `stats` and `job list`, a job's links in
//! `job show`, `job workflow`, and `check` reporting a workflow stuck behind a failing job.

use crate::fixtures::{assert_check_passes, json_of, RunOutput};
use crate::support::Db;

/// A chain written as the enqueue writes it: `charge` (ready, failing: 3 attempts and an
/// error), `receipt` waiting for it, `ledger` waiting for `receipt`; returns their ids.
async fn chain(db: &Db) -> (i64, i64, i64) {
    let ids: Vec<i64> = sqlx::query_scalar(
        "WITH charge AS (
             INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts,
                                     has_dependents, errors)
             VALUES ('charge_card', 'payments', '{}', 'ready', 3, 8, true,
                     '[{\"attempt\": 3, \"at\": \"2026-01-01T00:00:00Z\", \"kind\": \"transient\",
                        \"error\": \"card declined\"}]')
             RETURNING id
         ), receipt AS (
             INSERT INTO jobs_queue (kind, queue, payload, state, max_attempts, prerequisites_left,
                                     has_dependents)
             VALUES ('send_receipt', 'email', '{}', 'waiting', 8, 1, true) RETURNING id
         ), ledger AS (
             INSERT INTO jobs_queue (kind, queue, payload, state, max_attempts, prerequisites_left)
             VALUES ('update_ledger', 'payments', '{}', 'waiting', 8, 1) RETURNING id
         ), edges AS (
             INSERT INTO jobs_dependencies (prerequisite_id, dependent_id, on_failure)
             SELECT charge.id, receipt.id, 'cancel' FROM charge, receipt
             UNION ALL
             SELECT receipt.id, ledger.id, 'run' FROM receipt, ledger
         )
         SELECT id FROM charge UNION ALL SELECT id FROM receipt UNION ALL SELECT id FROM ledger",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    (ids[0], ids[1], ids[2])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_jobs_are_counted_listed_and_shown_with_their_links() {
    let db = Db::migrated().await;
    let (charge, receipt, ledger) = chain(&db).await;

    let run = db.jobs(&["stats"]).await.success();
    let lines = run.lines();
    assert!(lines[0].contains("  WAITING  READY  "), "{}", run.stdout);
    assert!(
        lines[1].starts_with("email     send_receipt         1      0"),
        "{}",
        run.stdout
    );
    let stats = json_of(&db, &["stats", "--json"]).await;
    assert_eq!(stats["total"]["waiting"], 2);

    let run = db
        .jobs(&["job", "list", "--state", "waiting"])
        .await
        .success();
    assert!(run.stdout.contains("update_ledger"), "{}", run.stdout);
    assert!(run.stdout.contains("send_receipt"), "{}", run.stdout);
    assert!(!run.stdout.contains("charge_card"), "{}", run.stdout);

    let run = db
        .jobs(&["job", "show", &receipt.to_string()])
        .await
        .success();
    assert!(
        run.stdout.starts_with(&format!(
            "job {receipt}: kind send_receipt in queue email, waiting\n"
        )),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(&format!(
            "runs after (1):\n  job {charge} charge_card ready (on failure: cancel)\n"
        )),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(&format!(
            "runs before (1):\n  job {ledger} update_ledger waiting\n"
        )),
        "{}",
        run.stdout
    );
    let shown = json_of(&db, &["job", "show", &ledger.to_string(), "--json"]).await;
    assert_eq!(shown["prerequisites"][0]["id"], receipt);
    assert_eq!(shown["prerequisites"][0]["on_failure"], "run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_workflow_prints_every_connected_job_and_its_edges() {
    let db = Db::migrated().await;
    let (charge, receipt, ledger) = chain(&db).await;
    let run = db
        .jobs(&["job", "workflow", &receipt.to_string()])
        .await
        .success();
    // The ID column is as wide as its widest cell: the starred job asked about.
    let starred = format!("*{receipt}");
    let width = starred.len().max(2);
    assert_eq!(
        run.lines(),
        [
            format!(
                "{:>width$}  KIND           QUEUE     STATE    RUNS AFTER",
                "ID"
            ),
            format!("{charge:>width$}  charge_card    payments  ready    -"),
            format!("{starred:>width$}  send_receipt   email     waiting  {charge}"),
            format!("{ledger:>width$}  update_ledger  payments  waiting  {receipt}"),
            format!("* job {receipt}; 3 jobs connected through dependencies"),
        ],
        "{}",
        run.stdout
    );
    let workflow = json_of(&db, &["job", "workflow", &ledger.to_string(), "--json"]).await;
    assert_eq!(workflow["jobs"].as_array().unwrap().len(), 3);
    assert_eq!(workflow["truncated"], false);
    let run = db
        .jobs(&["job", "workflow", &ledger.to_string(), "--limit", "2"])
        .await
        .success();
    assert!(
        run.stdout.contains("and more not listed (raise --limit)"),
        "{}",
        run.stdout
    );
    let line = db
        .jobs(&["job", "workflow", "999999"])
        .await
        .one_line_error();
    assert!(line.contains("999999"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_stuck_behind_a_failing_job_fails_the_check() {
    let db = Db::migrated().await;
    let (charge, receipt, _) = chain(&db).await;
    let flags = ["--max-ready-age", "1d", "--max-unserved-age", "1d"];
    assert_check_passes(&db, &flags).await;

    db.execute(&format!(
        "UPDATE jobs_queue SET created_at = now() - interval '2 hours' WHERE id = {receipt}"
    ))
    .await;
    let mut args = vec!["check"];
    args.extend(flags);
    let run = db.jobs(&args).await.failed_check();
    assert_eq!(
        run.stdout,
        format!(
            "workflow_stuck: job {receipt} (kind send_receipt, queue email) has waited 2h (at most 1h allowed) for job {charge} (kind charge_card), ready after 3 attempts, last error: card declined\n"
        )
    );
    let mut patient = flags.to_vec();
    patient.extend(["--max-waiting-age", "3h"]);
    assert_check_passes(&db, &patient).await;
}
