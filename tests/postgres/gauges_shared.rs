//! The gauges' health numbers are counted by one process per interval: the others publish the
//! figures that count stored, instead of counting the whole backlog themselves.

use std::time::Duration;

use jobs::metrics::Gauges;

use crate::support::Db;

const QUEUE: &str = "shared_gauges";

/// The ready count of `QUEUE` in a pass's figures.
fn ready(stats: &jobs::admin::Stats) -> Option<u64> {
    stats
        .kinds
        .iter()
        .find(|kind| kind.queue == QUEUE)
        .map(|kind| kind.counts.ready)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_of_many_processes_in_one_interval_count_once() {
    let db = Db::new().await;
    sqlx::query(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts)
         SELECT 'record_run', $1, '{}', 8 FROM generate_series(1, 3)",
    )
    .bind(QUEUE)
    .execute(&db.pool)
    .await
    .unwrap();
    let other = db.other_pool(2).await;
    let third = db.other_pool(2).await;
    let interval = Duration::from_secs(600);

    // Two processes' passes at once: one counts, the other does not wait for it.
    let (mut first, mut second) = (Gauges::new(), Gauges::new());
    let (a, b) = tokio::join!(
        first.refresh_shared(&db.pool, interval),
        second.refresh_shared(&other, interval)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(
        [a.counted, b.counted]
            .iter()
            .filter(|counted| **counted)
            .count(),
        1,
        "exactly one of two simultaneous passes counts: {a:?} {b:?}"
    );
    let counter = if a.counted { &a } else { &b };
    assert_eq!(ready(&counter.stats), Some(3));

    // A later pass in the same interval does not count, and publishes what the count found.
    let mut late = Gauges::new();
    let later = late.refresh_shared(&third, interval).await.unwrap();
    assert!(!later.counted, "a pass within the interval counts again");
    assert_eq!(later.stats, counter.stats);

    // Once the interval is over, the next pass counts again and sees the change.
    sqlx::query(
        "DELETE FROM jobs_queue WHERE queue = $1 AND id IN (SELECT min(id) FROM jobs_queue)",
    )
    .bind(QUEUE)
    .execute(&db.pool)
    .await
    .unwrap();
    let recount = late.refresh_shared(&third, Duration::ZERO).await.unwrap();
    assert!(recount.counted);
    assert_eq!(ready(&recount.stats), Some(2));
}
