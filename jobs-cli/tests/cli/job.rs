//! `jobs job run-now`: waiting jobs become due; the others are listed and left alone.

use crate::support::Db;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_now_makes_waiting_jobs_due_and_lists_the_others() {
    let db = Db::migrated().await;
    let waiting = db.insert(2, "send_email", "email", "ready").await;
    db.execute(&format!(
        "UPDATE jobs_queue SET run_at = now() + interval '1 hour' WHERE id IN ({}, {})",
        waiting[0], waiting[1]
    ))
    .await;
    let done = db.insert(1, "send_email", "email", "done").await;
    let (a, b, c) = (
        waiting[0].to_string(),
        waiting[1].to_string(),
        done[0].to_string(),
    );
    let run = db.jobs(&["job", "run-now", &a, &b, &c]).await.success();
    assert_eq!(
        run.stdout,
        format!(
            "made 2 jobs due now: send_email (queue email) 2\njob {c} is not waiting for a later time (due already, running, finished, dead or missing): nothing to do\n"
        )
    );
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'ready' AND run_at <= now()")
            .await,
        2
    );
    let again = db.jobs(&["job", "run-now", &a, "--json"]).await.success();
    let value: serde_json::Value = serde_json::from_str(&again.stdout).unwrap();
    assert_eq!(value["made_due"], serde_json::json!([]));
    assert_eq!(value["not_waiting"], serde_json::json!([waiting[0]]));
}
