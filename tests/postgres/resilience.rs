//! Leases, heartbeats, rescue, fencing and lost connections.

use std::time::Duration;

use crate::support::{fast_config, leased_config, start_worker, Db};
use crate::test_jobs::{enqueue_record_run, orphaned_record_run, waits_for_release};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_the_lease_of_a_job_that_outlasts_it() {
    let db = Db::new().await;
    db.create_releases().await;
    let id = waits_for_release::enqueue(&db.pool).await.unwrap().id();
    let config = leased_config(Duration::from_millis(600), Duration::from_millis(150));
    let worker = start_worker(&db.pool, &["waits_for_release"], config);
    db.wait_for_state(id, "running").await;
    let first_expiry = db.lease_expiry(id).await.unwrap();
    // Wait until the first lease is over by the database clock, and the job still holds one.
    db.wait_for_clock_past("the original lease to pass", first_expiry, 0.3)
        .await;
    let job = db.job(id).await;
    assert_eq!((job.state.as_str(), job.attempts), ("running", 1));
    assert!(db.lease_expiry(id).await.unwrap() > first_expiry);
    db.release(id).await;
    let job = db.wait_for_state(id, "done").await;
    worker.shutdown().await.expect("the worker stops");
    assert_eq!(job.attempts, 1);
    assert!(job.errors.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_workers_job_is_rescued_and_run_again() {
    let db = Db::new().await;
    let id = orphaned_record_run(&db, "orphan", 1).await;
    let job = db.run_until(&["record_run"], id, "done").await;
    assert_eq!(job.attempts, 2);
    assert_eq!(job.errors.len(), 1);
    assert_eq!(job.errors[0].kind, "lease_expired");
    assert_eq!(job.errors[0].attempt, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_keeps_killing_its_worker_ends_dead() {
    let db = Db::new().await;
    let id = orphaned_record_run(&db, "poison", 8).await;
    let job = db.run_until(&["record_run"], id, "dead").await;
    assert_eq!(job.errors[0].kind, "lease_expired");
    assert_eq!(db.count("SELECT count(*) FROM runs").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_lost_its_lease_cannot_complete_the_job() {
    let db = Db::new().await;
    db.create_releases().await;
    let id = waits_for_release::enqueue(&db.pool).await.unwrap().id();
    let worker = db.start_worker(&["waits_for_release"]);
    db.wait_for_state(id, "running").await;
    // Another worker takes the job over (as after a rescue and a new claim).
    let new_token: uuid::Uuid = sqlx::query_scalar(
        "UPDATE jobs_queue SET lease_token = gen_random_uuid(), attempts = attempts + 1
         WHERE id = $1 RETURNING lease_token",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    db.release(id).await;
    // Shutdown waits until the first worker has tried to record its outcome.
    worker.shutdown().await.expect("the worker stops");
    let (state, token) = db.state_and_token(id).await;
    assert_eq!(
        state, "running",
        "the stale worker must not complete the job"
    );
    assert_eq!(token, Some(new_token));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_survives_its_connections_being_killed() {
    let db = Db::new().await;
    let first = enqueue_record_run(&db, "before").await;
    let worker_pool = db.other_pool(5).await;
    let worker = start_worker(&worker_pool, &["record_run"], fast_config());
    db.wait_for_state(first, "done").await;
    let killed = db
        .count(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()) AS killed",
        )
        .await;
    assert!(killed > 0);
    let second = enqueue_record_run(&db, "after").await;
    db.wait_for_state(second, "done").await;
    worker.shutdown().await.expect("the worker stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_with_its_own_lease_is_claimed_for_that_long() {
    let db = Db::new().await;
    let short = crate::test_jobs::short_lease::enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    let normal = enqueue_record_run(&db, "normal").await;
    // Claim both as a worker would, then read the leases they got.
    let leases = [Duration::from_secs(1), Duration::from_secs(30)];
    let claimed = jobs::postgres::__private::store::claim(
        &db.pool,
        "default",
        &["short_lease", "record_run"],
        &leases,
        10,
        None,
    )
    .await
    .unwrap();
    assert_eq!(claimed.len(), 2);
    let lease_of = |id: i64| {
        db.job_value::<f64>(
            id,
            "extract(epoch FROM lease_expires_at - attempted_at)::float8",
        )
    };
    assert!((lease_of(short).await - 1.0).abs() < 0.01);
    assert!((lease_of(normal).await - 30.0).abs() < 0.01);
}
