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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_by_id_cancels_ready_jobs_asks_running_ones_and_lists_the_rest() {
    let db = Db::migrated().await;
    let ready = db.insert(2, "send_email", "email", "ready").await;
    let running = db.insert(1, "send_email", "email", "running").await;
    let done = db.insert(1, "send_email", "email", "done").await;
    let ids: Vec<String> = [ready[0], ready[1], running[0], done[0], 999_999]
        .iter()
        .map(ToString::to_string)
        .collect();
    let mut args = vec!["job", "cancel"];
    args.extend(ids.iter().map(String::as_str));
    args.extend(["--reason", "sent twice", "--by", "ops"]);
    let run = db.jobs(&args).await.success();
    assert_eq!(
        run.stdout,
        format!(
            "cancelled 2 jobs: send_email (queue email) 2\n\
             asked 1 running job to stop: send_email (queue email) 1 (each ends cancelled unless its run succeeds)\n\
             job {} is done: nothing to cancel\n\
             no job 999999: nothing to cancel\n",
            done[0]
        )
    );
    assert_eq!(
        db.count(
            "SELECT count(*) FROM jobs_queue WHERE state = 'cancelled'
               AND cancel_requested_by = 'ops' AND cancel_reason = 'sent twice'"
        )
        .await,
        2
    );
    assert_eq!(
        db.count(
            "SELECT count(*) FROM jobs_queue WHERE state = 'running'
               AND cancel_requested_at IS NOT NULL"
        )
        .await,
        1
    );
    let shown = db.jobs(&["dead", "show", &ids[0]]).await.success();
    let line = shown
        .stdout
        .lines()
        .find(|line| line.starts_with("  cancel asked "))
        .unwrap_or_else(|| panic!("who cancelled it: {shown:?}"));
    assert!(line.ends_with(" by ops: sent twice"), "{line}");
    let again = db
        .jobs(&["job", "cancel", &ids[0], "--json"])
        .await
        .success();
    let value: serde_json::Value = serde_json::from_str(&again.stdout).unwrap();
    assert_eq!(value["cancelled"], serde_json::json!([]));
    assert_eq!(
        value["not_cancellable"],
        serde_json::json!([{ "id": ready[0], "state": "cancelled" }])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_by_kind_and_dedupe_key_cancels_the_job_holding_it() {
    let db = Db::migrated().await;
    let keyed = jobs_testkit::JobRow::new("sync_user")
        .dedupe("sync:7", "active")
        .insert(&db.pool)
        .await;
    let run = db
        .jobs(&[
            "job",
            "cancel",
            "--kind",
            "sync_user",
            "--dedupe-key",
            "sync:7",
            "--json",
        ])
        .await
        .success();
    let value: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(value["cancelled"][0]["id"], keyed[0]);
    let none = db
        .jobs(&[
            "job",
            "cancel",
            "--kind",
            "sync_user",
            "--dedupe-key",
            "sync:7",
        ])
        .await
        .success();
    assert_eq!(
        none.stdout,
        "no job of kind sync_user holds dedupe key \"sync:7\": nothing to cancel\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_by_filter_previews_confirms_and_cancels_in_batches() {
    let db = Db::migrated().await;
    db.insert(1_200, "newsletter", "mail", "ready").await;
    db.execute(
        "UPDATE jobs_queue SET run_at = now() + interval '1 hour'
         WHERE kind = 'newsletter' AND id % 6 <> 0",
    )
    .await;
    db.insert(3, "receipt", "mail", "ready").await;
    let scheduled = db
        .count("SELECT count(*) FROM jobs_queue WHERE run_at > now()")
        .await;
    let filter = [
        "--kind",
        "newsletter",
        "--queue",
        "mail",
        "--state",
        "scheduled",
    ];

    let mut dry = vec!["job", "cancel", "--dry-run"];
    dry.extend(filter);
    let preview = db.jobs(&dry).await.success();
    assert_eq!(
        preview.stdout,
        format!(
            "would cancel {scheduled} ready jobs: the scheduled jobs of kind newsletter in queue mail\n"
        )
    );
    // Without a terminal to ask on, a filter needs --yes.
    let mut unconfirmed = vec!["job", "cancel"];
    unconfirmed.extend(filter);
    let refused = db.jobs(&unconfirmed).await.one_line_error();
    assert!(refused.contains("pass --yes"), "{refused}");
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'cancelled'")
            .await,
        0
    );

    let mut confirmed = unconfirmed.clone();
    confirmed.extend(["--yes", "--json"]);
    let run = db.jobs(&confirmed).await.success();
    let value: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        value["cancelled"].as_array().unwrap().len() as i64,
        scheduled
    );
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'cancelled'")
            .await,
        scheduled
    );
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'ready'")
            .await,
        1_203 - scheduled,
        "due jobs and other kinds are left"
    );
    let nothing_left = db
        .jobs(&[
            "job",
            "cancel",
            "--kind",
            "newsletter",
            "--state",
            "scheduled",
            "--yes",
        ])
        .await
        .success();
    assert_eq!(
        nothing_left.stdout,
        "no job cancelled: no scheduled jobs of kind newsletter\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_refuses_bad_input_before_changing_anything() {
    let db = Db::migrated().await;
    let ready = db.insert(1, "send_email", "email", "ready").await;
    let id = ready[0].to_string();

    // No selection at all: refused by the command line.
    let nothing = db.jobs(&["job", "cancel"]).await;
    assert_eq!(nothing.code, 2, "{nothing:?}");
    assert!(nothing.stderr.contains("required"), "{nothing:?}");
    // Ids and a filter at once, a key without its kind, a dry run by id.
    for args in [
        vec!["job", "cancel", id.as_str(), "--kind", "send_email"],
        vec!["job", "cancel", "--dedupe-key", "k"],
        vec!["job", "cancel", id.as_str(), "--dry-run"],
        vec!["job", "cancel", "--all", "--queue", "email"],
    ] {
        let refused = db.jobs(&args).await;
        assert_eq!(refused.code, 2, "{args:?}: {refused:?}");
        assert_eq!(refused.stdout, "", "{args:?}");
    }
    // Bad names and notes: one line saying what is wrong.
    let long = "x".repeat(1_001);
    let error = db
        .jobs(&["job", "cancel", id.as_str(), "--by", long.as_str()])
        .await
        .one_line_error();
    assert_eq!(error, "jobs: invalid by: it is longer than 1000 bytes");
    let error = db
        .jobs(&["job", "cancel", "--kind", "no spaces", "--yes"])
        .await
        .one_line_error();
    assert!(error.starts_with("jobs: invalid kind: "), "{error}");
    let error = db
        .jobs(&["job", "cancel", "--queue", "", "--yes"])
        .await
        .one_line_error();
    assert!(error.starts_with("jobs: invalid queue name: "), "{error}");
    assert_eq!(
        db.count(
            "SELECT count(*) FROM jobs_queue WHERE state = 'ready' AND cancel_requested_at IS NULL"
        )
        .await,
        1
    );
}
