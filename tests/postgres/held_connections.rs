//! A busy producer keeps one pool connection for its claims, and the completer one for its
//! outcomes, while their statements follow each other; each gives it back as soon as they stop,
//! so that jobs waiting on the pool are not kept from it.

use std::time::Duration;

use sqlx::PgPool;

use crate::support::{fast_config, start_worker, wait_until, Db};
use crate::test_jobs::{send_receipt, waits_for_release};
use jobs::WorkerConfig;

/// The slots of the draining workers below.
const CONCURRENCY: usize = 4;

/// A worker draining short jobs, with a batch window long enough that a slot always frees
/// within it, however slow the machine: its producer stays busy. It claims no more than its free
/// slots, so that the drain takes many claims (claims ahead are `read_ahead`'s).
fn draining_config() -> WorkerConfig {
    WorkerConfig {
        default_concurrency: CONCURRENCY,
        claim_batch_window: Duration::from_millis(100),
        claim_ahead: 0,
        ..fast_config()
    }
}

/// Connections of `pool` checked out at this moment.
fn in_use(pool: &PgPool) -> u32 {
    // The two counts are read one after the other, while connections come and go.
    pool.size()
        .saturating_sub(u32::try_from(pool.num_idle()).unwrap_or(u32::MAX))
}

/// Waits until a moment when no connection of `pool` is checked out: the jobs running poll the
/// database for a moment every 20 ms, so such moments come at once unless a connection is held.
async fn wait_until_none_in_use(pool: &PgPool, what: &str) {
    wait_until(what, || async { in_use(pool) == 0 }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_go_back_while_every_slot_runs_and_once_outcomes_are_written() {
    let db = Db::new().await;
    db.create_releases().await;
    let pool = db.other_pool(10).await;
    // Without notifications, no listener holds a connection of the pool.
    let config = WorkerConfig {
        default_concurrency: 2,
        listen: false,
        ..fast_config()
    };
    let worker = start_worker(&pool, &["waits_for_release"], config);
    let first = waits_for_release::enqueue(&db.pool).await.unwrap().id();
    let second = waits_for_release::enqueue(&db.pool).await.unwrap().id();
    db.wait_for_state(first, "running").await;
    db.wait_for_state(second, "running").await;
    // The claim filled every slot, so the producer was busy; it waits for a slot without its
    // connection.
    wait_until_none_in_use(
        &pool,
        "the producer to give its connection back while both jobs run",
    )
    .await;
    db.release(first).await;
    db.release(second).await;
    db.wait_for_state(first, "done").await;
    db.wait_for_state(second, "done").await;
    wait_until_none_in_use(&pool, "the completer to give its connection back once idle").await;
    worker.shutdown().await.unwrap();
}

/// The claims of a queue draining short jobs run on one connection, which plans the claim once
/// and keeps its plan, where claims spread over the pool's connections would each be planned
/// again on every connection (five one-off plans on each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_queue_claims_on_one_connection() {
    let db = Db::new().await;
    let args = (0..3_000).map(|order_id| send_receipt::Args { order_id });
    send_receipt::enqueue_many(&db.pool, args).await.unwrap();
    let pool = db.other_pool(10).await;
    let worker = start_worker(&pool, &["send_receipt"], draining_config());
    db.wait_for_count(
        "every job done",
        "SELECT count(*) FROM jobs_queue WHERE state = 'done'",
        3_000,
    )
    .await;
    worker.shutdown().await.unwrap();
    wait_until_none_in_use(&pool, "every connection back in the pool").await;
    // Each pool connection's claim executions, from its prepared statements.
    let mut connections = Vec::new();
    let mut executions = Vec::new();
    for _ in 0..pool.size() {
        let mut connection = pool.acquire().await.unwrap();
        let claims: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(generic_plans + custom_plans), 0)::bigint
             FROM pg_prepared_statements
             WHERE statement LIKE '%FOR UPDATE SKIP LOCKED%' AND statement LIKE '%SET state = ''running''%'",
        )
        .fetch_one(&mut *connection)
        .await
        .unwrap();
        executions.push(claims);
        connections.push(connection);
    }
    let all: i64 = executions.iter().sum();
    let most = executions.iter().copied().max().unwrap_or(0);
    println!("claims per connection: {executions:?}");
    assert!(
        all >= 3_000 / i64::try_from(CONCURRENCY).unwrap(),
        "the queue drained in claims of at most {CONCURRENCY}: {executions:?}"
    );
    assert!(
        most * 2 > all,
        "most claims on one connection: {executions:?}"
    );
}

/// Closing the pool under a busy worker stops its claims at once: the producer gives up the
/// connection it keeps instead of claiming on with it (each claim stranding its jobs as running
/// until their leases expire) until the jobs' outcomes, unwritable, fill the completer's queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_pool_stops_a_busy_worker_claiming() {
    let db = Db::new().await;
    let args = (0..100_000).map(|order_id| send_receipt::Args { order_id });
    send_receipt::enqueue_many(&db.pool, args).await.unwrap();
    let pool = db.other_pool(10).await;
    let config = WorkerConfig {
        listen: false,
        ..draining_config()
    };
    let worker = start_worker(&pool, &["send_receipt"], config);
    let claimed = "SELECT count(*) FROM jobs_queue WHERE state <> 'ready'";
    db.wait_for_count_at_least("the queue to be draining", claimed, 100)
        .await;
    pool.close().await;
    let claimed_at_close = db.count(claimed).await;
    wait_until("every connection of the closed pool to close", || async {
        // sqlx 0.8's `close` can return with connections still out, and a connection whose
        // return to the pool (its ping) began before the close can land among the idle ones
        // afterwards, where nothing closes it (launchbadge/sqlx#3217). Closing again closes it;
        // connections still held are left alone.
        let _ = tokio::time::timeout(Duration::from_millis(20), pool.close()).await;
        pool.size() == 0
    })
    .await;
    let claimed_after = db.count(claimed).await;
    // One claim may have been under way as the pool closed.
    assert!(
        claimed_after <= claimed_at_close + i64::try_from(CONCURRENCY).unwrap(),
        "the worker claimed {} jobs after its pool closed",
        claimed_after - claimed_at_close
    );
    drop(worker);
}
