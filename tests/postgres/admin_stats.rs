//! The health numbers: exact for the live states, exact for the retained ones while they are few
//! and estimated beyond, and cheap on a table holding a million done rows.

use std::time::{Duration, Instant};

use jobs::admin::{self, Counts, RetainedCounts, EXACT_RETAINED_BOUND};
use jobs::postgres::__private::sql;

use jobs_testkit::RowState::{self, Cancelled, Dead, Done, Ready, Running, Waiting};
use jobs_testkit::{hours, minutes, JobRow};

use crate::plans::{
    assert_no_seq_scan, assert_reads_just, explain, explain_analyze, indexes_read, plan_nodes,
    scans_of,
};
use crate::support::Db;

/// `send_email` rows in queue `email`, in `state`.
fn email(state: RowState) -> JobRow {
    JobRow::new("send_email").queue("email").state(state)
}

/// `resize` rows in queue `default`, in `state`.
fn resize(state: RowState) -> JobRow {
    JobRow::new("resize").state(state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_states_are_counted_exactly_per_queue_and_kind() {
    let db = Db::new().await;
    db.insert_all([
        email(Ready).count(3).due_for(minutes(10)),
        email(Ready).count(2).due_in(hours(1)),
        email(Running).count(4),
        email(Running).lease_expired_for(minutes(2)),
        email(Dead).count(2),
        resize(Dead),
        resize(Done).count(40),
        resize(Cancelled).count(5),
    ])
    .await;
    db.execute("ANALYZE jobs_queue").await;

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
    // So few retained jobs are counted, not estimated.
    assert_eq!(stats.retained, RetainedCounts::Counted);
    assert_eq!((resize.done, resize.cancelled), (40, 5));
    assert!(stats.analyzed_ago.is_some());

    let total = stats.total();
    assert_eq!((total.ready, total.dead, total.done), (3, 3, 40));
    assert_eq!(stats.queues().len(), 2);
}

/// Keeps autovacuum from analyzing the table while a test looks at it unanalyzed.
async fn without_autovacuum(db: &Db) {
    db.execute("ALTER TABLE jobs_queue SET (autovacuum_enabled = false)")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_table_counts_its_finished_jobs_before_any_analyze() {
    let db = Db::new().await;
    without_autovacuum(&db).await;
    let stats = admin::stats(&db.pool).await.unwrap();
    assert!(stats.kinds.is_empty());
    assert_eq!(stats.total(), Counts::default());

    // Right after a first run: every job done, the table never analyzed.
    db.insert_all([
        resize(Done).count(3),
        email(Cancelled).count(2),
        resize(Ready),
    ])
    .await;
    let stats = admin::stats(&db.pool).await.unwrap();
    assert_eq!(stats.retained, RetainedCounts::Counted);
    assert_eq!(stats.analyzed_ago, None, "never analyzed");
    let summary: Vec<(&str, &str, u64, u64, u64)> = stats
        .kinds
        .iter()
        .map(|kind| {
            (
                kind.queue.as_str(),
                kind.kind.as_str(),
                kind.counts.ready,
                kind.counts.done,
                kind.counts.cancelled,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("default", "resize", 1, 3, 0),
            ("email", "send_email", 0, 0, 2)
        ],
        "a kind with only finished jobs is listed too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_bound_and_before_any_analyze_the_finished_jobs_are_unknown() {
    let db = Db::new().await;
    without_autovacuum(&db).await;
    db.insert_rows(resize(Done).count(EXACT_RETAINED_BOUND))
        .await;
    let stats = admin::stats(&db.pool).await.unwrap();
    assert_eq!(
        stats.retained,
        RetainedCounts::Counted,
        "the bound is counted"
    );
    assert_eq!(stats.total().done, EXACT_RETAINED_BOUND.unsigned_abs());

    db.insert_rows(resize(Cancelled)).await;
    let stats = admin::stats(&db.pool).await.unwrap();
    assert_eq!(stats.retained, RetainedCounts::Unknown);
    assert_eq!((stats.total().done, stats.total().cancelled), (0, 0));
    let listed: Vec<(&str, &str)> = stats
        .kinds
        .iter()
        .map(|kind| (kind.queue.as_str(), kind.kind.as_str()))
        .collect();
    assert_eq!(
        listed,
        [("default", "resize")],
        "the kinds counted are listed"
    );

    // Analyzed, the numbers are the planner's (the sample holds every row of so small a table).
    db.execute("ANALYZE jobs_queue").await;
    let stats = admin::stats(&db.pool).await.unwrap();
    assert_eq!(stats.retained, RetainedCounts::Estimated);
    assert_eq!(
        (stats.total().done, stats.total().cancelled),
        (EXACT_RETAINED_BOUND.unsigned_abs(), 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stats_plan_on_a_million_done_rows_reads_only_the_live_indexes() {
    let db = Db::new().await;
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, finished_at)
         SELECT CASE WHEN n % 3 = 0 THEN 'send_email' ELSE 'resize' END,
                CASE WHEN n % 3 = 0 THEN 'email' ELSE 'default' END,
                '{}'::jsonb, 'done', 1, 8, now()
         FROM generate_series(1, 1000000) AS n",
    )
    .await;
    db.insert_all([
        email(Ready).count(20),
        resize(Running).count(4),
        resize(Dead).count(3),
        resize(Waiting).count(7),
    ])
    .await;
    db.execute("ANALYZE jobs_queue").await;

    let plan: serde_json::Value = sqlx::query_scalar(&explain(sql::QUEUE_STATS))
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let nodes = plan_nodes(&plan);
    println!("stats plan on 1,000,000 done rows:\n{}", outline(&nodes));
    assert_no_seq_scan(&scans_of(&nodes, "jobs_queue"), "the stats query");
    let mut indexes = indexes_read(&nodes);
    indexes.retain(|index| index.starts_with("jobs_queue"));
    // Only the live states' partial indexes are read.
    assert_reads_just(
        &indexes,
        &[
            "jobs_queue_waiting",
            "jobs_queue_ready",
            "jobs_queue_leases",
            "jobs_queue_dead",
        ],
    );

    // The exact count of finished jobs, were it run on this table (never analyzed, say), stops
    // after the bound, read in the retention index's order.
    let plan: serde_json::Value = sqlx::query_scalar(&explain_analyze(sql::RETAINED_COUNTS))
        .bind(EXACT_RETAINED_BOUND + 1)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let nodes = plan_nodes(&plan);
    println!(
        "bounded count of finished jobs on 1,000,000 done rows ({} ms):\n{}",
        plan[0]["Execution Time"],
        outline(&nodes)
    );
    let on_jobs = scans_of(&nodes, "jobs_queue");
    assert_eq!(
        on_jobs,
        [("Index Scan".to_string(), "jobs_queue_finished".to_string())],
        "read through the retention index only"
    );
    let read = nodes
        .iter()
        .find(|node| node["Relation Name"] == "jobs_queue")
        .and_then(|node| node["Actual Rows"].as_i64())
        .expect("rows read");
    assert_eq!(read, EXACT_RETAINED_BOUND + 1, "stops after the bound");

    let stats = admin::stats(&db.pool).await.unwrap();
    assert_eq!(stats.retained, RetainedCounts::Estimated);
    let done: u64 = stats.kinds.iter().map(|kind| kind.counts.done).sum();
    assert!(
        (900_000..=1_100_000).contains(&done),
        "done is estimated near 1,000,000: {done}"
    );
    assert_eq!(stats.total().ready, 20);
    assert_eq!(stats.total().waiting, 7);

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

/// One line per plan node: its type, and the index or relation it reads.
fn outline(nodes: &[serde_json::Value]) -> String {
    nodes
        .iter()
        .map(|node| {
            let on = node["Index Name"]
                .as_str()
                .or_else(|| node["Relation Name"].as_str())
                .map_or_else(String::new, |on| format!(" on {on}"));
            format!("  {}{on}", node["Node Type"].as_str().unwrap_or("?"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}
