//! Enqueue announces ready work only while a worker waits for it, and no wake-up is lost: the
//! races between a worker running out of work and an enqueue still in flight.
//!
//! The workers here poll once a minute, so a job found only by polling would outlast every wait
//! of these tests: each job they wait for is found through a wake-up.

use std::time::Duration;

use jobs::{JobId, Worker, WorkerConfig, WorkerHandle};
use sqlx::postgres::PgListener;
use sqlx::{PgPool, Postgres, Transaction};

use crate::bulk_copy::{copies_at_the_gate, hold_copies, labels, open_the_gate};
use crate::support::{fast_config, Db};
use crate::test_jobs::{per_merchant, record_run, waits_for_release};

/// The locks on queue `default`'s watch lock in exclusive mode, `granted` or waiting, as rows
/// of `pg_locks` (the worker's other advisory locks, such as retention's, are other keys).
fn watch_locks_where(granted: bool) -> String {
    format!(
        "FROM pg_locks, (SELECT hashtextextended('jobs_watch:default', 0) AS key) AS watch
         WHERE locktype = 'advisory' AND objsubid = 1
           AND classid::bigint = (watch.key >> 32) & 4294967295
           AND objid::bigint = watch.key & 4294967295
           AND mode = 'ExclusiveLock' AND granted = {granted}
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
}

/// How many sessions hold (`granted`) or wait for queue `default`'s watch lock.
fn watch_locks(granted: bool) -> String {
    format!("SELECT count(*) {}", watch_locks_where(granted))
}

/// A worker of `kinds` with `slots` on `default` that polls once a minute, on a pool of its own.
async fn start_slow_polling_worker(db: &Db, kinds: &[&str], slots: usize) -> WorkerHandle {
    let pool = db.other_pool(4).await;
    Worker::builder(pool)
        .kinds(kinds.iter().copied())
        .state(db.pool.clone())
        .queue("default", slots)
        .config(WorkerConfig {
            poll_interval: Duration::from_secs(60),
            ..fast_config()
        })
        .build()
        .expect("worker builds")
        .start()
}

/// Waits until job `id` is done.
async fn wait_done(db: &Db, id: JobId) {
    db.wait_for_count(
        &format!("job {id} done"),
        &format!("SELECT count(*) FROM jobs_queue WHERE id = {id} AND state = 'done'"),
        1,
    )
    .await;
}

/// A worker of one slot busy with a long job (released by `db.release`), which has let its
/// watch go. Returns the worker and the long job.
async fn worker_busy_without_a_watch(db: &Db) -> (WorkerHandle, JobId) {
    db.create_releases().await;
    let worker = start_slow_polling_worker(db, &["record_run", "waits_for_release"], 1).await;
    let long = waits_for_release::enqueue(&db.pool).await.unwrap().id();
    db.wait_for_count(
        "the long job running",
        &format!("SELECT count(*) FROM jobs_queue WHERE id = {long} AND state = 'running'"),
        1,
    )
    .await;
    db.wait_for_count("the watch let go", &watch_locks(true), 0)
        .await;
    (worker, long)
}

/// A worker that ran out of work while a transaction that enqueued a job, when nobody watched
/// the queue, is still open: the worker's watch waits for that transaction. Returns the open
/// transaction (on a pool of its own) and the job it enqueued.
async fn worker_waiting_behind_an_open_enqueue(
    db: &Db,
) -> (WorkerHandle, PgPool, Transaction<'static, Postgres>, JobId) {
    let (worker, long) = worker_busy_without_a_watch(db).await;
    let enqueuing = db.other_pool(1).await;
    let mut transaction = enqueuing.begin().await.unwrap();
    let in_flight = record_run::enqueue_in(&mut transaction, "in flight".into())
        .await
        .unwrap()
        .id();
    // The long job ends, the worker finds nothing it can see and asks to watch the queue,
    // which waits for the open transaction.
    db.release(long).await;
    wait_done(db, long).await;
    db.wait_for_count("the watch asked for", &watch_locks(false), 1)
        .await;
    (worker, enqueuing, transaction, in_flight)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_enqueued_while_the_worker_ran_out_of_work_is_claimed_once_committed() {
    let db = Db::new().await;
    let (_worker, _pool, transaction, in_flight) = worker_waiting_behind_an_open_enqueue(&db).await;
    // It commits without announcing anything (nobody watched when it enqueued): the watch is
    // granted then, and the worker claims again.
    transaction.commit().await.unwrap();
    wait_done(&db, in_flight).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_copied_while_the_worker_ran_out_of_work_is_claimed_once_committed() {
    let db = Db::new().await;
    let (_worker, long) = worker_busy_without_a_watch(&db).await;
    // A bulk written by COPY (nobody watching) held open before its rows are written.
    let mut gate = hold_copies(&db).await;
    let bulk = tokio::spawn({
        let pool = db.pool.clone();
        async move { record_run::enqueue_many(&pool, labels()).await }
    });
    db.wait_for_count("the copy at the gate", &copies_at_the_gate(), 1)
        .await;
    // The worker runs out of work; its watch waits for the copy's transaction.
    db.release(long).await;
    wait_done(&db, long).await;
    db.wait_for_count("the watch asked for", &watch_locks(false), 1)
        .await;
    open_the_gate(&mut gate).await;
    bulk.await.unwrap().expect("the bulk is written");
    db.wait_for_count_at_least(
        "a job of the bulk done",
        "SELECT count(*) FROM jobs_queue WHERE kind = 'record_run' AND state = 'done'",
        1,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_enqueued_while_a_long_transaction_delays_the_watch_are_announced() {
    let db = Db::new().await;
    let (_worker, _pool, transaction, in_flight) = worker_waiting_behind_an_open_enqueue(&db).await;
    let announced = record_run::enqueue(&db.pool, "announced".into())
        .await
        .unwrap()
        .id();
    wait_done(&db, announced).await;
    transaction.commit().await.unwrap();
    wait_done(&db, in_flight).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_announces_only_queues_a_worker_watches() {
    let db = Db::new().await;
    let mut listener = PgListener::connect_with(&db.pool).await.unwrap();
    listener.listen("jobs_queue").await.unwrap();
    let _worker = start_slow_polling_worker(&db, &["record_run"], 1).await;
    db.wait_for_count("the idle worker watching", &watch_locks(true), 1)
        .await;
    // Nobody serves `elsewhere`: its job is not announced. `default` is watched: its job is,
    // and notifications arrive in commit order.
    let unwatched = record_run::builder("unwatched".into())
        .queue("elsewhere")
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    let watched = record_run::enqueue(&db.pool, "watched".into())
        .await
        .unwrap()
        .id();
    let first = tokio::time::timeout(Duration::from_secs(20), listener.recv())
        .await
        .expect("a notification within 20 s")
        .unwrap();
    assert_eq!(first.payload(), "default", "job {unwatched} was announced");
    wait_done(&db, watched).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_whose_session_is_lost_is_taken_again() {
    let db = Db::new().await;
    let _worker = start_slow_polling_worker(&db, &["record_run"], 1).await;
    db.wait_for_count("the idle worker watching", &watch_locks(true), 1)
        .await;
    let watching = db
        .count(&format!(
            "SELECT max(pid)::bigint {}",
            watch_locks_where(true)
        ))
        .await;
    db.execute(&format!("SELECT pg_terminate_backend({watching})"))
        .await;
    db.wait_for_count(
        "the watch taken again on another session",
        &format!("{} AND pid <> {watching}", watch_locks(true)),
        1,
    )
    .await;
    let id = record_run::enqueue(&db.pool, "after".into())
        .await
        .unwrap()
        .id();
    wait_done(&db, id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_a_limit_holds_back_is_woken_by_jobs_the_limit_lets_in() {
    let db = Db::new().await;
    let _worker = start_slow_polling_worker(&db, &["per_merchant"], 4).await;
    // Merchant a's third job waits on its limit of 2 running, with slots free.
    let long = (0..3).map(|_| per_merchant::Args {
        merchant: "a".into(),
        millis: 60_000,
    });
    per_merchant::enqueue_many(&db.pool, long).await.unwrap();
    db.wait_for_count(
        "merchant a at its limit",
        "SELECT count(*) FROM jobs_queue WHERE state = 'running'",
        2,
    )
    .await;
    let other = per_merchant::enqueue(&db.pool, "b".into(), 0)
        .await
        .unwrap()
        .id();
    wait_done(&db, other).await;
}
