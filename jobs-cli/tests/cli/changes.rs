//! Commands that change the queue: `--dry-run` changes nothing and lists what would change,
//! `--json` is for machines, and a broad selection needs `--yes` when there is no terminal to
//! ask on (the tests run the binary with stdin not a terminal, as cron and scripts do).

use serde_json::Value;

use crate::fixtures::{
    backdate, json_of, park_outbox_rows, share_active_dedupe_key, RunOutput, Schedule,
};
use crate::support::Db;

/// The rows of `jobs_queue` and `jobs_outbox`, to compare before and after a dry run.
async fn snapshot(db: &Db) -> (Vec<(i64, String, i32)>, Vec<(i64, String)>) {
    let jobs = sqlx::query_as("SELECT id, state, attempts FROM jobs_queue ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let outbox = sqlx::query_as("SELECT id, state FROM jobs_outbox ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    (jobs, outbox)
}

/// The ids under `key` of a JSON report, whether listed as numbers or as `{"id": ..}`.
fn ids(value: &Value, key: &str) -> Vec<i64> {
    value[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {value}"))
        .iter()
        .map(|item| item.as_i64().or_else(|| item["id"].as_i64()).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_runs_change_nothing_and_list_what_would_change() {
    let db = Db::migrated().await;
    let dead = db.insert(2, "resize", "default", "dead").await;
    let held = db.insert(1, "sync_user", "sync", "dead").await;
    let holder = db.insert(1, "sync_user", "sync", "ready").await;
    share_active_dedupe_key(&db, &[held[0], holder[0]], "sync:1").await;
    let old = db.insert(3, "resize", "default", "done").await;
    backdate(&db, &old, &["finished_at"], "8 days").await;
    park_outbox_rows(&db, 2).await;
    Schedule {
        ticked_ago: "3 days",
        ..Schedule::default()
    }
    .insert(&db)
    .await;
    let before = snapshot(&db).await;

    let replay = db
        .jobs(&["dead", "replay", "--all", "--dry-run"])
        .await
        .success();
    assert!(replay.stdout.starts_with("ID  KIND"), "{replay:?}");
    assert!(
        replay
            .stdout
            .contains("would replay 2 dead jobs: resize (queue default) 2\n"),
        "{replay:?}"
    );
    assert!(
        replay.stdout.contains(&format!(
            "would skip job {} (kind sync_user, queue sync): job {} holds its dedupe key \"sync:1\"",
            held[0], holder[0]
        )),
        "{replay:?}"
    );
    let replay = json_of(&db, &["dead", "replay", "--all", "--dry-run", "--json"]).await;
    assert_eq!(replay["dry_run"], true);
    assert_eq!(ids(&replay, "replayed"), dead);
    assert_eq!(ids(&replay, "skipped"), held);
    assert_eq!(replay["skipped"][0]["held_by"], holder[0]);

    let discard = json_of(
        &db,
        &["dead", "discard", "--kind", "resize", "--dry-run", "--json"],
    )
    .await;
    assert_eq!(ids(&discard, "discarded"), dead);
    let discard = db
        .jobs(&["dead", "discard", "--id", &dead[0].to_string(), "--dry-run"])
        .await
        .success();
    assert!(
        discard
            .stdout
            .ends_with("would discard 1 dead job: resize (queue default) 1\n"),
        "{discard:?}"
    );

    db.jobs(&["prune", "--dry-run"])
        .await
        .prints("would delete 3 jobs finished more than 7d ago (3 done, 0 cancelled)\n");
    let prune = json_of(&db, &["prune", "--dry-run", "--json"]).await;
    assert_eq!(prune["done"], 3);
    assert_eq!(prune["dry_run"], true);

    db.jobs(&["outbox", "replay", "--all", "--dry-run"])
        .await
        .prints("would replay 2 parked outbox rows: 1, 2\n");
    let outbox = json_of(
        &db,
        &[
            "outbox",
            "replay",
            "--id",
            "2",
            "--id",
            "9",
            "--dry-run",
            "--json",
        ],
    )
    .await;
    assert_eq!(ids(&outbox, "replayed"), [2]);
    assert_eq!(ids(&outbox, "not_parked"), [9]);

    db.jobs(&["schedule", "remove", "nightly", "--dry-run"])
        .await
        .prints("would remove schedule nightly; its jobs would stay\n");
    let schedule = json_of(
        &db,
        &["schedule", "remove", "nightly", "--dry-run", "--json"],
    )
    .await;
    assert_eq!(schedule["removed"], true);

    assert_eq!(snapshot(&db).await, before, "a dry run changed something");
    assert_eq!(db.count("SELECT count(*) FROM jobs_schedules").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_reports_what_was_changed() {
    let db = Db::migrated().await;
    let dead = db.insert(2, "resize", "default", "dead").await;
    db.insert(1, "resize", "default", "done").await;
    park_outbox_rows(&db, 1).await;

    let replay = json_of(
        &db,
        &["dead", "replay", "--id", &dead[0].to_string(), "--json"],
    )
    .await;
    assert_eq!(replay["dry_run"], false);
    assert_eq!(ids(&replay, "replayed"), [dead[0]]);
    let discard = json_of(
        &db,
        &[
            "dead",
            "discard",
            "--id",
            &dead[0].to_string(),
            "--id",
            &dead[1].to_string(),
            "--json",
        ],
    )
    .await;
    assert_eq!(ids(&discard, "discarded"), [dead[1]]);
    assert_eq!(ids(&discard, "not_dead"), [dead[0]]);
    let outbox = json_of(&db, &["outbox", "replay", "--all", "--yes", "--json"]).await;
    assert_eq!(ids(&outbox, "replayed"), [1]);
    let prune = json_of(&db, &["prune", "--older-than", "0s", "--json"]).await;
    assert_eq!(prune["done"], 1);
    assert_eq!(prune["dry_run"], false);
    let schedule = json_of(&db, &["schedule", "remove", "nightly", "--json"]).await;
    assert_eq!(schedule["removed"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broad_selection_without_a_terminal_needs_yes() {
    let db = Db::migrated().await;
    let dead = db.insert(2, "resize", "default", "dead").await;
    park_outbox_rows(&db, 1).await;
    let before = snapshot(&db).await;

    for args in [
        &["dead", "replay", "--all"][..],
        &["dead", "replay", "--kind", "resize"],
        &["dead", "discard", "--queue", "default"],
        &["dead", "discard", "--older-than", "0s"],
        &["outbox", "replay", "--all"],
    ] {
        let line = db.jobs(args).await.one_line_error();
        assert!(line.contains("needs confirmation"), "{args:?}: {line}");
        assert!(line.contains("--yes"), "{args:?}: {line}");
    }
    assert_eq!(
        snapshot(&db).await,
        before,
        "a refused command changed something"
    );

    // Named ids are not broad: no confirmation needed.
    db.jobs(&["dead", "replay", "--id", &dead[0].to_string()])
        .await
        .success();
    // With --yes it goes ahead.
    db.jobs(&["dead", "discard", "--all", "--yes"])
        .await
        .prints("discarded 1 dead job: resize (queue default) 1\n");
    db.jobs(&["outbox", "replay", "--all", "-y"])
        .await
        .prints("replayed 1 parked outbox row: a relay publishes it next\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_of_removing_a_schedule_still_kept_up_with_says_it_needs_force() {
    let db = Db::migrated().await;
    Schedule::default().insert(&db).await;
    let refused = db
        .jobs(&["schedule", "remove", "nightly", "--dry-run"])
        .await;
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(refused.stderr.contains("--force"), "{refused:?}");
    db.jobs(&["schedule", "remove", "nightly", "--dry-run", "--force"])
        .await
        .prints("would remove schedule nightly; its jobs would stay\n");
    assert_eq!(db.count("SELECT count(*) FROM jobs_schedules").await, 1);
}
