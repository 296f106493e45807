//! `jobs queue pause|resume`: the pause is recorded with who and why, shown by `stats`, judged
//! by `check`, and undone by `resume`; both are safe to repeat.

use crate::support::Db;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_shows_in_stats_and_check_then_resume_undoes_it() {
    let db = Db::migrated().await;
    db.insert(3, "send_email", "email", "ready").await;
    let paused = db
        .jobs(&[
            "queue",
            "pause",
            "email",
            "--reason",
            "provider down",
            "--by",
            "ops",
        ])
        .await
        .success();
    assert_eq!(
        paused.stdout,
        "paused queue email: workers claim none of its jobs until `jobs queue resume email`; running jobs finish\n"
    );
    let again = db.jobs(&["queue", "pause", "email"]).await.success();
    assert_eq!(
        again.stdout,
        "queue email was paused already: its first pause is kept\n"
    );

    let stats = db.jobs(&["stats"]).await.success();
    let line = stats
        .stdout
        .lines()
        .find(|line| line.starts_with("paused: "))
        .unwrap_or_else(|| panic!("a pause line: {stats:?}"));
    assert!(
        line.starts_with("paused: queue email for ") && line.ends_with(" by ops: provider down"),
        "{line}"
    );
    let json = db.jobs(&["stats", "--json"]).await.success();
    let value: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(value["paused"][0]["queue"], "email");
    assert_eq!(value["paused"][0]["paused_by"], "ops");
    assert_eq!(value["paused"][0]["reason"], "provider down");

    // Healthy within the default hour; over a threshold of nothing, the pause is the alert.
    db.jobs(&["check"]).await.success();
    let strict = db.jobs(&["check", "--max-paused", "0s"]).await;
    assert_eq!(strict.code, 1, "{strict:?}");
    assert!(
        strict
            .stdout
            .starts_with("queue_paused: queue email has been paused for ")
            && strict
                .stdout
                .contains(" by ops, with 3 jobs waiting (at most 0ms allowed)"),
        "{strict:?}"
    );

    let resumed = db.jobs(&["queue", "resume", "email"]).await.success();
    assert!(
        resumed.stdout.starts_with("resumed queue email after "),
        "{resumed:?}"
    );
    let again = db
        .jobs(&["queue", "resume", "email", "--json"])
        .await
        .success();
    let value: serde_json::Value = serde_json::from_str(&again.stdout).unwrap();
    assert_eq!(value["resumed"], false);
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue_pauses").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_queue_name_is_refused_in_one_line() {
    let db = Db::migrated().await;
    let error = db
        .jobs(&["queue", "pause", "no spaces"])
        .await
        .one_line_error();
    assert!(error.contains("invalid queue name"), "{error}");
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue_pauses").await, 0);
}
