//! The health numbers: exact for the live states, estimated for the retained ones, and cheap on
//! a table holding a million done rows.

use std::time::{Duration, Instant};

use jobs::admin::{self, Counts};
use jobs::postgres::__private::sql;

use crate::rows::JobRows;
use crate::support::{plan_nodes, scans_of, Db};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_states_are_counted_exactly_per_queue_and_kind() {
    let db = Db::new().await;
    JobRows {
        kind: "send_email",
        queue: "email",
        count: 3,
        run_at: "now() - interval '10 minutes'",
        ..JobRows::default()
    }
    .insert(&db.pool)
    .await;
    JobRows {
        kind: "send_email",
        queue: "email",
        count: 2,
        run_at: "now() + interval '1 hour'",
        ..JobRows::default()
    }
    .insert(&db.pool)
    .await;
    JobRows {
        kind: "send_email",
        queue: "email",
        state: "running",
        count: 4,
        ..JobRows::default()
    }
    .insert(&db.pool)
    .await;
    JobRows {
        kind: "send_email",
        queue: "email",
        state: "running",
        lease_expires_at: "now() - interval '2 minutes'",
        ..JobRows::default()
    }
    .insert(&db.pool)
    .await;
    JobRows {
        kind: "send_email",
        queue: "email",
        state: "dead",
        count: 2,
        ..JobRows::default()
    }
    .insert(&db.pool)
    .await;
    JobRows {
        state: "dead",
        ..JobRows::default()
    }
    .insert(&db.pool)
    .await;
    JobRows {
        state: "done",
        count: 40,
        ..JobRows::default()
    }
    .insert(&db.pool)
    .await;
    JobRows {
        state: "cancelled",
        count: 5,
        ..JobRows::default()
    }
    .insert(&db.pool)
    .await;
    sqlx::query("ANALYZE jobs_queue")
        .execute(&db.pool)
        .await
        .unwrap();

    let stats = admin::stats(&db.pool).await.unwrap();
    let summary: Vec<(&str, &str)> = stats
        .kinds
        .iter()
        .map(|kind| (kind.queue.as_str(), kind.kind.as_str()))
        .collect();
    assert_eq!(summary, [("default", "resize"), ("email", "send_email")]);

    let email = &stats.kinds[1].counts;
    assert_eq!(
        (
            email.ready,
            email.scheduled,
            email.running,
            email.expired_leases,
            email.dead
        ),
        (3, 2, 5, 1, 2)
    );
    let waited = email.oldest_ready_age.expect("a due job");
    assert!(
        waited >= Duration::from_secs(600) && waited < Duration::from_secs(660),
        "{waited:?}"
    );
    let expired = email.longest_expired_lease.expect("an expired lease");
    assert!(expired >= Duration::from_secs(120), "{expired:?}");

    let resize = &stats.kinds[0].counts;
    assert_eq!(
        (resize.ready, resize.dead, resize.oldest_ready_age),
        (0, 1, None)
    );
    // The sample holds every row of so small a table: the estimates are exact here.
    assert!(stats.estimated);
    assert_eq!((resize.done, resize.cancelled), (40, 5));
    assert!(stats.analyzed_ago.is_some());

    let total = stats.total();
    assert_eq!((total.ready, total.dead, total.done), (3, 3, 40));
    assert_eq!(stats.queues().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_queue_has_no_numbers_and_estimates_wait_for_analyze() {
    let db = Db::new().await;
    let stats = admin::stats(&db.pool).await.unwrap();
    assert!(stats.kinds.is_empty());
    assert_eq!(stats.total(), Counts::default());

    // Done rows before any ANALYZE: counted as 0, and said to be unestimated.
    JobRows {
        state: "done",
        count: 3,
        ..JobRows::default()
    }
    .insert(&db.pool)
    .await;
    JobRows {
        ..JobRows::default()
    }
    .insert(&db.pool)
    .await;
    let stats = admin::stats(&db.pool).await.unwrap();
    assert!(!stats.estimated);
    assert_eq!(stats.kinds[0].counts.ready, 1);
    assert_eq!(stats.kinds[0].counts.done, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stats_plan_on_a_million_done_rows_reads_only_the_live_indexes() {
    let db = Db::new().await;
    sqlx::query(
        "INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, finished_at)
         SELECT CASE WHEN n % 3 = 0 THEN 'send_email' ELSE 'resize' END,
                CASE WHEN n % 3 = 0 THEN 'email' ELSE 'default' END,
                '{}'::jsonb, 'done', 1, 8, now()
         FROM generate_series(1, 1000000) AS n",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    JobRows {
        kind: "send_email",
        queue: "email",
        count: 20,
        ..JobRows::default()
    }
    .insert(&db.pool)
    .await;
    JobRows {
        state: "running",
        count: 4,
        ..JobRows::default()
    }
    .insert(&db.pool)
    .await;
    JobRows {
        state: "dead",
        count: 3,
        ..JobRows::default()
    }
    .insert(&db.pool)
    .await;
    sqlx::query("ANALYZE jobs_queue")
        .execute(&db.pool)
        .await
        .unwrap();

    let plan: serde_json::Value =
        sqlx::query_scalar(&format!("EXPLAIN (FORMAT JSON) {}", sql::QUEUE_STATS))
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let nodes = plan_nodes(&plan);
    let on_jobs: Vec<(String, String)> = scans_of(&nodes, "jobs_queue");
    let indexes: Vec<&str> = nodes
        .iter()
        .filter_map(|node| node["Index Name"].as_str())
        .filter(|index| index.starts_with("jobs_queue"))
        .collect();
    assert!(
        on_jobs.iter().all(|(node, _)| node != "Seq Scan"),
        "no sequential scan of the table: {on_jobs:?}"
    );
    for live in ["jobs_queue_ready", "jobs_queue_leases", "jobs_queue_dead"] {
        assert!(indexes.contains(&live), "{live} not used: {indexes:?}");
    }
    assert!(
        indexes.iter().all(
            |index| ["jobs_queue_ready", "jobs_queue_leases", "jobs_queue_dead"].contains(index)
        ),
        "only the live states' partial indexes are read: {indexes:?}"
    );

    let stats = admin::stats(&db.pool).await.unwrap();
    let done: u64 = stats.kinds.iter().map(|kind| kind.counts.done).sum();
    assert!(
        (900_000..=1_100_000).contains(&done),
        "done is estimated near 1,000,000: {done}"
    );
    assert_eq!(stats.total().ready, 20);

    // Timed, not asserted: shows what polling costs (run with --nocapture to see it).
    let mut times = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        admin::stats(&db.pool).await.unwrap();
        times.push(started.elapsed());
    }
    times.sort();
    println!(
        "stats query on 1,000,000 done rows: median {:?}, fastest {:?}, slowest {:?} (20 runs)",
        times[times.len() / 2],
        times[0],
        times[times.len() - 1]
    );
}
