//! The outbox from the command line: its numbers in `jobs stats`, its thresholds in `jobs
//! check`, and `jobs outbox list|replay` for parked rows.

use crate::fixtures::{assert_check_passes, assert_framed, json_of, RunOutput};
use crate::support::Db;

/// Two unpublished rows, the oldest written 10 minutes ago, one published, two parked.
async fn fill(db: &Db) {
    db.execute(
        "INSERT INTO jobs_outbox (topic, payload, created_at)
         VALUES ('orders.placed', '{\"order_id\": 1}', now() - interval '10 minutes'),
                ('orders.placed', '{\"order_id\": 2}', now())",
    )
    .await;
    db.execute(
        "INSERT INTO jobs_outbox (topic, payload, state, attempts, published_at)
         VALUES ('orders.placed', '{\"order_id\": 0}', 'published', 1, now())",
    )
    .await;
    db.execute(
        "INSERT INTO jobs_outbox (topic, payload, state, attempts, last_error, parked_at)
         VALUES ('reports.ready', '{\"report_id\": 7}', 'parked', 100, 'publishing to events.reports.ready: no stream captures this subject', now()),
                ('orders.paid', '{\"order_id\": 3}', 'parked', 1, 'the payload is 2097162 bytes, more than the server''s max_payload of 1048576', now())",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_an_outbox_left_behind_and_parked_rows() {
    let db = Db::migrated().await;
    fill(&db).await;
    let run = db.jobs(&["check"]).await.failed_check();
    let lines = run.lines();
    assert_eq!(lines.len(), 2, "{run:?}");
    assert_framed(
        lines[0],
        "outbox_age: the oldest of 2 unpublished outbox rows was written 10m",
        "(at most 5m allowed): is a relay running, and the broker reachable?",
    );
    assert_eq!(
        lines[1],
        "outbox_parked: 2 parked outbox rows (at most 0 allowed): see `jobs outbox list`, replay with `jobs outbox replay`"
    );
    assert_check_passes(&db, &["--max-unpublished-age", "15m", "--max-parked", "2"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_show_the_outbox() {
    let db = Db::migrated().await;
    fill(&db).await;
    let run = db.jobs(&["stats"]).await.success();
    assert_framed(
        run.lines()
            .into_iter()
            .find(|line| line.starts_with("outbox: "))
            .unwrap_or_default(),
        "outbox: 2 unpublished, the oldest written 10m",
        " ago; 2 parked",
    );
    let stats = json_of(&db, &["stats", "--json"]).await;
    assert_eq!(stats["outbox"]["unpublished"], 2);
    assert_eq!(stats["outbox"]["parked"], 2);
    let age = stats["outbox"]["oldest_unpublished_secs"]
        .as_f64()
        .expect("a number");
    assert!((600.0..660.0).contains(&age), "{age}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_rows_are_listed_and_replayed() {
    let db = Db::migrated().await;
    db.jobs(&["outbox", "list"])
        .await
        .prints("no parked outbox rows\n");
    fill(&db).await;
    let list = db.jobs(&["outbox", "list"]).await.success();
    let lines = list.lines();
    assert_eq!(
        lines[0], "ID  TOPIC          ATTEMPTS  PARKED FOR  LAST ERROR",
        "{list:?}"
    );
    assert_framed(
        lines[1],
        " 4  reports.ready       100",
        "no stream captures this subject",
    );
    assert!(
        lines[2].starts_with(" 5  orders.paid           1"),
        "{list:?}"
    );
    assert_eq!(lines[3], "2 parked outbox rows");
    let listed = json_of(&db, &["outbox", "list", "--topic", "orders.paid", "--json"]).await;
    assert_eq!(listed["parked"][0]["id"], 5);
    assert_eq!(listed["parked"][0]["payload"]["order_id"], 3);

    db.jobs(&["outbox", "replay", "--id", "5", "--id", "1"])
        .await
        .prints(concat!(
            "replayed 1 parked outbox row: a relay publishes it next\n",
            "outbox row 1 is not parked: nothing to replay\n",
        ));
    db.jobs(&["outbox", "replay", "--all", "--yes"])
        .await
        .prints("replayed 1 parked outbox row: a relay publishes it next\n");
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_outbox WHERE state = 'pending' AND attempts = 0")
            .await,
        4
    );
    let none = db.jobs(&["outbox", "replay"]).await.one_line_error();
    assert!(none.contains("--id"), "{none}");
}
