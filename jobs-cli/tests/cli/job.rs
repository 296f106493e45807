//! `jobs job list|show|run-now`: pages of jobs of any state with the cursor of the next, one
//! job in full, waiting jobs made due.

use crate::fixtures::{json_of, postpone};
use crate::support::Db;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_list_pages_through_the_jobs_a_filter_selects() {
    let db = Db::migrated().await;
    let ready = db.insert(3, "send_email", "email", "ready").await;
    let done = db.insert(2, "resize", "default", "done").await;
    let dead = db.insert(1, "resize", "default", "dead").await;
    db.execute(&format!(
        r#"UPDATE jobs_queue SET errors = '[{{"attempt": 1, "at": "2030-01-01T00:00:00Z", "kind": "permanent", "error": "no such user\u001b[2J"}}]'
           WHERE id = {}"#,
        dead[0]
    ))
    .await;

    // Newest first, a page at a time, with the cursor of the next.
    let first = db.jobs(&["job", "list", "--limit", "4"]).await.success();
    let lines: Vec<&str> = first.stdout.lines().collect();
    assert_eq!(lines.len(), 6, "{}", first.stdout);
    let words =
        |line: &str| -> Vec<String> { line.split_whitespace().map(str::to_owned).collect() };
    assert_eq!(
        words(lines[0]),
        ["ID", "KIND", "QUEUE", "STATE", "ATTEMPTS", "ENQUEUED", "FINISHED", "LAST", "ERROR"]
    );
    assert_eq!(
        words(lines[1])[..5],
        [
            dead[0].to_string(),
            "resize".into(),
            "default".into(),
            "dead".into(),
            "1/1".into()
        ]
    );
    assert!(
        lines[1].ends_with("permanent: no such user\\u{1b}[2J"),
        "escaped: {}",
        lines[1]
    );
    let next = ready[2];
    assert_eq!(lines[5], format!("4 jobs; next page: --after {next}"));
    let second = db
        .jobs(&["job", "list", "--limit", "4", "--after", &next.to_string()])
        .await
        .success();
    assert_eq!(second.stdout.lines().count(), 4, "{}", second.stdout);
    assert!(second.stdout.ends_with("\n2 jobs\n"), "{}", second.stdout);

    // Filters, in JSON.
    let page = json_of(
        &db,
        &[
            "job", "list", "--kind", "resize", "--state", "done", "--json",
        ],
    )
    .await;
    let ids: Vec<i64> = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|job| job["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![done[1], done[0]]);
    assert_eq!(page["next"], serde_json::Value::Null);
    assert_eq!(page["jobs"][0]["state"], "done");
    let failing = json_of(&db, &["job", "list", "--error", "NO SUCH", "--json"]).await;
    assert_eq!(failing["jobs"][0]["id"], dead[0]);
    assert_eq!(
        failing["jobs"][0]["last_error"]["error"],
        "no such user\u{1b}[2J"
    );
    postpone(&db, &ready[..1], "1 hour").await;
    let scheduled = json_of(
        &db,
        &[
            "job",
            "list",
            "--state",
            "scheduled",
            "--queue",
            "email",
            "--json",
        ],
    )
    .await;
    assert_eq!(scheduled["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(scheduled["jobs"][0]["state"], "scheduled");
    let recent = json_of(
        &db,
        &[
            "job",
            "list",
            "--since",
            "1h",
            "--finished-until",
            "2099-01-01T00:00:00Z",
            "--json",
        ],
    )
    .await;
    assert_eq!(
        recent["jobs"].as_array().unwrap().len(),
        3,
        "the finished ones"
    );
    let none = db
        .jobs(&["job", "list", "--kind", "resize", "--dedupe-key", "k"])
        .await
        .success();
    assert_eq!(none.stdout, "no jobs match\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_list_refuses_bad_input_in_one_line() {
    let db = Db::migrated().await;
    for (args, expected) in [
        (
            vec!["--limit", "0"],
            "jobs: invalid page size: 0 is out of range: a page holds 1 to 500 jobs",
        ),
        (
            vec!["--limit", "501"],
            "jobs: invalid page size: 501 is out of range: a page holds 1 to 500 jobs",
        ),
        (vec!["--kind", ""], "jobs: invalid kind: kind name is empty"),
        (vec!["--error", ""], "jobs: invalid error text: it is empty"),
        (
            vec!["--since", "1h", "--until", "2h"],
            "jobs: invalid enqueued time: the range ends",
        ),
        (
            vec!["--after", "x1"],
            "jobs: invalid value 'x1' for '--after <CURSOR>': invalid cursor",
        ),
        (
            vec!["--state", "sleeping"],
            "jobs: invalid value 'sleeping' for '--state <STATE>': unknown job status",
        ),
        (
            vec!["--since", "yesterday"],
            "jobs: invalid value 'yesterday' for '--since <TIME|AGE>'",
        ),
        (
            vec!["--dedupe-key", "k"],
            "jobs: the following required arguments were not provided: --kind",
        ),
    ] {
        let mut all = vec!["job", "list"];
        all.extend(args.iter().copied());
        let line = db.jobs(&all).await.one_line_error();
        assert!(line.starts_with(expected), "{args:?}: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_show_shows_a_job_of_any_state() {
    let db = Db::migrated().await;
    let ready = db.insert(1, "send_email", "email", "ready").await;
    let show = db
        .jobs(&["job", "show", &ready[0].to_string()])
        .await
        .success();
    assert!(
        show.stdout.starts_with(&format!(
            "job {}: kind send_email in queue email, ready\n",
            ready[0]
        )),
        "{}",
        show.stdout
    );
    let json = json_of(&db, &["job", "show", &ready[0].to_string(), "--json"]).await;
    assert_eq!(json["state"], "ready");
    let line = db.jobs(&["job", "show", "999"]).await.one_line_error();
    assert!(line.starts_with("jobs: no job 999"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_show_prints_a_done_jobs_output() {
    let db = Db::migrated().await;
    let done = db.insert(2, "charge_card", "payments", "done").await;
    db.execute(&format!(
        "UPDATE jobs_queue SET output = '{{\"number\": \"R-7\"}}' WHERE id = {}",
        done[0]
    ))
    .await;
    let show = db
        .jobs(&["job", "show", &done[0].to_string()])
        .await
        .success();
    assert!(
        show.stdout
            .contains("  output       {\"number\":\"R-7\"}\n"),
        "{}",
        show.stdout
    );
    let json = json_of(&db, &["job", "show", &done[0].to_string(), "--json"]).await;
    assert_eq!(json["output"], serde_json::json!({"number": "R-7"}));
    // A job without an output prints no output line.
    let plain = db
        .jobs(&["job", "show", &done[1].to_string()])
        .await
        .success();
    assert!(!plain.stdout.contains("output"), "{}", plain.stdout);
    let json = json_of(&db, &["job", "show", &done[1].to_string(), "--json"]).await;
    assert_eq!(json["output"], serde_json::Value::Null);
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_list_says_when_a_page_stopped_at_the_examination_bound() {
    let db = Db::migrated().await;
    let rare = db.insert(2, "send_email", "rare", "ready").await;
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, finished_at)
         SELECT 'resize', 'default', '{}', 'done', 1, 8, now() FROM generate_series(1, 10050)",
    )
    .await;
    let first = db.jobs(&["job", "list", "--queue", "rare"]).await.success();
    let cursor: i64 = db.count("SELECT max(id) - 10000 + 1 FROM jobs_queue").await;
    assert_eq!(
        first.stdout,
        format!(
            "no jobs match so far; examined 10000 jobs without filling the page, more may match: go on with --after {cursor} (or narrow with --kind)\n"
        )
    );
    let second = db
        .jobs(&[
            "job",
            "list",
            "--queue",
            "rare",
            "--after",
            &cursor.to_string(),
        ])
        .await
        .success();
    let lines: Vec<&str> = second.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", second.stdout);
    assert!(lines[1].trim_start().starts_with(&rare[1].to_string()));
    assert_eq!(lines[3], "2 jobs");
}
