//! `jobs workers` lists the live worker processes, `jobs stats` counts them, and
//! `jobs throughput` shows the runs ended per minute, queue and kind.

use crate::fixtures::{json_of, live_worker, RunOutput};
use crate::support::Db;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_lists_the_live_workers_and_stats_counts_them() {
    let db = Db::migrated().await;
    db.jobs(&["workers"]).await.prints(
        "no live workers: no worker process has said it is running in the last few seconds\n",
    );
    live_worker(&db, &["email", "default"], &["send_email", "resize"]).await;
    // A worker not seen for longer than its `gone_after` is gone.
    live_worker(&db, &["email"], &["send_email"]).await;
    db.execute(
        "UPDATE jobs_workers SET last_seen_at = now() - interval '1 minute'
         WHERE cardinality(kinds) = 1",
    )
    .await;

    let run = db.jobs(&["workers"]).await.success();
    let lines = run.lines();
    assert_eq!(
        lines[0],
        "HOST   PID  VERSION  STARTED  LAST SEEN  QUEUES                  KINDS"
    );
    assert!(
        lines[1].starts_with("box   4242  0.1.0    1h ago   ")
            && lines[1].ends_with("  default (4), email (4)  resize, send_email"),
        "{}",
        run.stdout
    );
    assert_eq!(
        lines[2..],
        ["1 worker live; QUEUES: each with how many of its jobs the worker runs at once"]
    );

    let json = json_of(&db, &["workers", "--json"]).await;
    let workers = json["workers"].as_array().expect("a list");
    assert_eq!(workers.len(), 1, "{json}");
    assert_eq!(workers[0]["host"], "box");
    assert_eq!(workers[0]["pid"], 4242);
    assert_eq!(
        workers[0]["kinds"],
        serde_json::json!(["resize", "send_email"])
    );
    assert_eq!(
        workers[0]["queues"],
        serde_json::json!([
            {"queue": "default", "concurrency": 4},
            {"queue": "email", "concurrency": 4},
        ])
    );
    assert!(workers[0]["id"].as_str().is_some_and(|id| id.len() == 36));

    let stats = db.jobs(&["stats"]).await.success();
    assert_eq!(
        stats.lines().last().copied(),
        Some("workers: 1 live, serving 2 queues (default, email); `jobs workers` lists them"),
        "{stats:?}"
    );
    assert_eq!(json_of(&db, &["stats", "--json"]).await["live_workers"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_lists_the_limits_each_worker_enforces() {
    let db = Db::migrated().await;
    live_worker(&db, &["default"], &["charge", "deliver_webhook"]).await;
    db.execute(
        r#"UPDATE jobs_workers SET limits = '[
             {"kind": "deliver_webhook", "max_running": null, "rate_jobs": 100,
              "rate_window_secs": 1.0},
             {"kind": "charge", "max_running": 10, "rate_jobs": null, "rate_window_secs": null,
              "max_running_per_key": 2, "rate_per_key_jobs": 10, "rate_per_key_window_secs": 1.0}
           ]'"#,
    )
    .await;
    let run = db.jobs(&["workers"]).await.success();
    let lines = run.lines();
    assert_eq!(
        lines[lines.len() - 2..],
        [
            "limit: worker box/4242: kind deliver_webhook: at most 100/1s started",
            "limit: worker box/4242: kind charge: at most 10 running, at most 2 running per key, \
             at most 10/1s started per key",
        ],
        "{}",
        run.stdout
    );
    let json = json_of(&db, &["workers", "--json"]).await;
    assert_eq!(
        json["workers"][0]["limits"][1],
        serde_json::json!({
            "kind": "charge",
            "max_running": 10,
            "rate_limit": null,
            "max_running_per_key": 2,
            "rate_limit_per_key": "10/1s",
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_json_shows_each_per_key_limit_with_the_keys_it_holds() {
    let db = Db::migrated().await;
    live_worker(&db, &["default"], &["charge"]).await;
    db.execute(
        r#"UPDATE jobs_workers SET limits = '[
             {"kind": "charge", "max_running": null, "rate_jobs": null, "rate_window_secs": null,
              "max_running_per_key": 2, "rate_per_key_jobs": 10, "rate_per_key_window_secs": 1.0}
           ]'"#,
    )
    .await;
    let running = db.insert(2, "charge", "default", "running").await;
    let waiting = db.insert(2, "charge", "default", "ready").await;
    sqlx::query("UPDATE jobs_queue SET limit_key = 'merchant-1' WHERE id = ANY ($1)")
        .bind([&running[..], &waiting[..1]].concat())
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE jobs_queue SET limit_key = 'merchant-2' WHERE id = $1")
        .bind(waiting[1])
        .execute(&db.pool)
        .await
        .unwrap();
    let json = json_of(&db, &["stats", "--json"]).await;
    assert_eq!(
        json["limits"][0],
        serde_json::json!({
            "kind": "charge",
            "max_running": null,
            "running": 2,
            "rate_limit": null,
            "started_in_window": 0,
            "max_running_per_key": 2,
            "rate_limit_per_key": "10/1s",
            "keys_at_limit": 1,
            "due": 2,
            "held_back": 1,
            "workers_disagree": false,
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throughput_shows_the_runs_ended_per_minute_summed_over_workers() {
    let db = Db::migrated().await;
    db.jobs(&["throughput"])
        .await
        .prints("no runs ended in the last 60 minutes\n");
    db.execute(
        "INSERT INTO jobs_throughput (minute, queue, kind, worker_id, done, retried, dead, cancelled)
         VALUES (date_trunc('minute', now()) - interval '5 minutes', 'email', 'send_email', gen_random_uuid(), 40, 3, 1, 0),
                (date_trunc('minute', now()) - interval '5 minutes', 'email', 'send_email', gen_random_uuid(), 2, 0, 0, 1),
                (date_trunc('minute', now()) - interval '2 hours', 'email', 'send_email', gen_random_uuid(), 9, 9, 9, 9)",
    )
    .await;
    let run = db.jobs(&["throughput"]).await.success();
    let lines = run.lines();
    assert_eq!(
        lines[0],
        "MINUTE (UTC)      QUEUE  KIND        DONE  RETRIED  DEAD  CANCELLED"
    );
    assert!(
        lines[1].ends_with("  email  send_email    42        3     1          1"),
        "{}",
        run.stdout
    );
    assert_eq!(
        lines[2],
        "last 60m          total                42        3     1          1"
    );
    assert_eq!(
        lines.len(),
        3,
        "the minute 2 hours ago is left out: {}",
        run.stdout
    );

    let json = json_of(&db, &["throughput", "--minutes", "180", "--json"]).await;
    assert_eq!(json["minutes"], 180);
    let points = json["points"].as_array().expect("a list");
    assert_eq!(points.len(), 2, "{json}");
    assert_eq!(points[0]["done"], 9);
    assert_eq!(
        (&points[1]["done"], &points[1]["cancelled"]),
        (&42.into(), &1.into())
    );

    let refused = db.jobs(&["throughput", "--minutes", "0"]).await;
    assert_eq!(refused.code, 2, "{refused:?}");
}
