//! Throughput over time: each worker counts the runs that end per queue and kind in memory and
//! adds them to its own rows every presence interval; `admin::throughput` sums them per minute,
//! through the primary key; retention deletes old rows.

use std::time::Duration;

use jobs::admin::{self, Retention, RetentionConfig, ThroughputPoint};
use jobs::postgres::__private::sql;
use jobs::{JobId, WorkerConfig};

use crate::plans::{
    assert_no_seq_scan, assert_reads_just, explain, explain_analyze, indexes_read, plan_nodes,
    scans_of,
};
use crate::support::{fast_config, start_worker, wait_until, Db};
use crate::test_jobs::{always_failing, cancels, flaky, orphaned_record_run, record_run};

/// Worker settings with the presence (and throughput) written every 100 ms.
fn counting_config() -> WorkerConfig {
    WorkerConfig {
        presence_interval: Duration::from_millis(100),
        ..fast_config()
    }
}

/// The last hour's runs ended of `kind`, summed over minutes: (done, retried, dead, cancelled).
fn sums(points: &[ThroughputPoint], kind: &str) -> (u64, u64, u64, u64) {
    points
        .iter()
        .filter(|point| point.kind == kind)
        .fold((0, 0, 0, 0), |sum, point| {
            (
                sum.0 + point.done,
                sum.1 + point.retried,
                sum.2 + point.dead,
                sum.3 + point.cancelled,
            )
        })
}

/// Enqueues the mix the test drains: 6 jobs that succeed, 3 that fail once then succeed, 2
/// that fail on each of their 3 attempts, 2 that cancel themselves, and one left running by a
/// worker that died (rescued, then run). Returns every id.
async fn enqueue_mix(db: &Db) -> Vec<JobId> {
    let mut ids = Vec::new();
    for n in 0..6 {
        ids.push(
            record_run::enqueue(&db.pool, format!("ok {n}"))
                .await
                .unwrap()
                .id(),
        );
    }
    for _ in 0..3 {
        ids.push(flaky::enqueue(&db.pool, 1).await.unwrap().id());
    }
    for _ in 0..2 {
        ids.push(always_failing::enqueue(&db.pool).await.unwrap().id());
    }
    for _ in 0..2 {
        ids.push(cancels::enqueue(&db.pool).await.unwrap().id());
    }
    ids.push(orphaned_record_run(db, "orphan", 1).await);
    ids
}

const KINDS: [&str; 4] = ["record_run", "flaky", "always_failing", "cancels"];

/// Waits until none of the jobs is ready or running.
async fn wait_for_all_final(db: &Db) {
    db.wait_for_count(
        "every job to reach a final state",
        "SELECT count(*) FROM jobs_queue WHERE state IN ('ready', 'running')",
        0,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_throughput_sums_equal_the_runs_that_ended() {
    let db = Db::new().await;
    enqueue_mix(&db).await;
    let worker = start_worker(&db.pool, &KINDS, counting_config());
    wait_for_all_final(&db).await;
    let expected = [
        // The orphan: rescued (an attempt that failed), then done.
        ("record_run", (7, 1, 0, 0)),
        ("flaky", (3, 3, 0, 0)),
        ("always_failing", (0, 4, 2, 0)),
        ("cancels", (0, 0, 0, 2)),
    ];
    wait_until("the worker to write what it counted", || async {
        let points = admin::throughput(&db.pool, Duration::from_secs(3600))
            .await
            .unwrap();
        expected
            .iter()
            .all(|(kind, counts)| sums(&points, kind) == *counts)
    })
    .await;
    worker.shutdown().await.expect("the worker stops");

    // Nothing counted twice by the last write at shutdown; every point is of the current hour.
    let points = admin::throughput(&db.pool, Duration::from_secs(3600))
        .await
        .unwrap();
    for (kind, counts) in expected {
        assert_eq!(sums(&points, kind), counts, "{kind}: {points:?}");
    }
    assert!(points.iter().all(|point| point.queue == "default"));
    // The real record agrees: done, dead and cancelled jobs.
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'done'")
            .await,
        10
    );
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'dead'")
            .await,
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_worker_writes_what_it_counted_last() {
    let db = Db::new().await;
    let ids = enqueue_mix(&db).await;
    // A presence interval far longer than the test: only the write at shutdown can count.
    let config = WorkerConfig {
        presence_interval: Duration::from_secs(3600),
        ..fast_config()
    };
    let worker = start_worker(&db.pool, &KINDS, config);
    wait_for_all_final(&db).await;
    worker.shutdown().await.expect("the worker stops");
    let points = admin::throughput(&db.pool, Duration::from_secs(3600))
        .await
        .unwrap();
    let ended: u64 = KINDS
        .iter()
        .map(|kind| {
            let (done, retried, dead, cancelled) = sums(&points, kind);
            done + retried + dead + cancelled
        })
        .sum();
    assert_eq!(ended, 10 + 8 + 2 + 2, "{} jobs: {points:?}", ids.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_the_throughput_off_counts_nothing() {
    let db = Db::new().await;
    enqueue_mix(&db).await;
    let config = WorkerConfig {
        throughput: false,
        ..counting_config()
    };
    let worker = start_worker(&db.pool, &KINDS, config);
    wait_for_all_final(&db).await;
    worker.shutdown().await.expect("the worker stops");
    assert_eq!(db.count("SELECT count(*) FROM jobs_throughput").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throughput_sums_the_workers_of_each_minute_and_refuses_an_empty_window() {
    let db = Db::new().await;
    db.execute(
        "INSERT INTO jobs_throughput (minute, queue, kind, worker_id, done, retried, dead, cancelled)
         VALUES (date_trunc('minute', now()) - interval '2 minutes', 'mail', 'send', gen_random_uuid(), 5, 1, 0, 0),
                (date_trunc('minute', now()) - interval '2 minutes', 'mail', 'send', gen_random_uuid(), 7, 0, 1, 2),
                (date_trunc('minute', now()) - interval '2 minutes', 'mail', 'bounce', gen_random_uuid(), 1, 0, 0, 0),
                (date_trunc('minute', now()), 'mail', 'send', gen_random_uuid(), 3, 0, 0, 0),
                (date_trunc('minute', now()) - interval '3 hours', 'mail', 'send', gen_random_uuid(), 100, 0, 0, 0)",
    )
    .await;
    let points = admin::throughput(&db.pool, Duration::from_secs(3600))
        .await
        .unwrap();
    let summary: Vec<(i64, &str, u64, u64, u64, u64)> = points
        .iter()
        .map(|point| {
            (
                (points[points.len() - 1].minute - point.minute).num_minutes(),
                point.kind.as_str(),
                point.done,
                point.retried,
                point.dead,
                point.cancelled,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (2, "bounce", 1, 0, 0, 0),
            (2, "send", 12, 1, 1, 2),
            (0, "send", 3, 0, 0, 0)
        ],
        "by minute, then queue and kind, summed over workers; the minute 3 hours ago left out"
    );
    for window in [Duration::ZERO, Duration::from_secs(400 * 86_400)] {
        let refused = admin::throughput(&db.pool, window).await.unwrap_err();
        assert!(
            matches!(refused, admin::AdminError::InvalidWindow(_)),
            "{refused}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_throughput_rows_past_their_age() {
    let db = Db::new().await;
    db.execute(
        "INSERT INTO jobs_throughput (minute, queue, kind, worker_id, done)
         SELECT date_trunc('minute', now()) - make_interval(mins => n), 'mail', 'send',
                gen_random_uuid(), 1
         FROM generate_series(0, 3 * 24 * 60 - 1) AS n",
    )
    .await;
    let retention = Retention::new(
        db.pool.clone(),
        RetentionConfig {
            batch_size: 1_000,
            ..RetentionConfig::default()
        },
    )
    .unwrap();
    let first = retention.run_once().await.unwrap();
    assert_eq!(first.throughput, 1_000);
    assert!(first.more, "a full batch: more may be waiting");
    while retention.run_once().await.unwrap().more {}
    // Two days are kept: the minutes of the last 48 hours (the current one included).
    let kept = db.count("SELECT count(*) FROM jobs_throughput").await;
    assert!((2 * 24 * 60..=2 * 24 * 60 + 1).contains(&kept), "{kept}");
    assert_eq!(
        db.count(
            "SELECT count(*) FROM jobs_throughput WHERE minute < now() - interval '2 days 1 minute'"
        )
        .await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_throughput_statements_read_the_primary_key_on_four_days_of_rows() {
    let db = Db::new().await;
    // Four days, every other minute, 10 kinds in 5 queues, 10 workers each: 576,000 rows, as
    // with retention of the throughput turned off for a while.
    db.execute(
        "INSERT INTO jobs_throughput (minute, queue, kind, worker_id, done, retried)
         SELECT date_trunc('minute', now()) - make_interval(mins => m),
                'queue_' || (k % 5), 'kind_' || k, w.id, 3, 1
         FROM generate_series(0, 4 * 24 * 60 - 1) AS m,
              generate_series(0, 9) AS k,
              (SELECT gen_random_uuid() AS id FROM generate_series(1, 10)) AS w
         WHERE m % 2 = 0",
    )
    .await;
    db.execute("ANALYZE jobs_throughput").await;

    // The last hour.
    let plan: serde_json::Value = sqlx::query_scalar(&explain_analyze(sql::THROUGHPUT))
        .bind(3600.0_f64)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let nodes = plan_nodes(&plan);
    println!(
        "throughput of the last hour on 4 days of rows ({} ms): {:?}",
        plan[0]["Execution Time"],
        scans_of(&nodes, "jobs_throughput")
    );
    assert_no_seq_scan(&scans_of(&nodes, "jobs_throughput"), "the throughput query");
    assert_reads_just(&indexes_read(&nodes), &["jobs_throughput_pkey"]);

    // Retention's batch.
    let plan: serde_json::Value = sqlx::query_scalar(&explain(sql::PRUNE_THROUGHPUT))
        .bind(2.0 * 86_400.0_f64)
        .bind(1_000_i64)
        .bind(sql::RETENTION_LOCK_KEY)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let nodes = plan_nodes(&plan);
    let scans = scans_of(&nodes, "jobs_throughput");
    println!("throughput retention: {scans:?}");
    assert_no_seq_scan(&scans, "the throughput retention");
    assert_reads_just(&indexes_read(&nodes), &["jobs_throughput_pkey"]);

    // A worker's write of its counts.
    let plan: serde_json::Value = sqlx::query_scalar(&explain(sql::ADD_THROUGHPUT))
        .bind(uuid::Uuid::new_v4())
        .bind(vec!["queue_1"])
        .bind(vec!["kind_1"])
        .bind(vec![1_i64])
        .bind(vec![0_i64])
        .bind(vec![0_i64])
        .bind(vec![0_i64])
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let scans = scans_of(&plan_nodes(&plan), "jobs_throughput");
    println!("throughput write: {scans:?}");
    assert_no_seq_scan(&scans, "the throughput write");
}
