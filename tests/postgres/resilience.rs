//! Leases, heartbeats, rescue, fencing and lost connections.

use std::time::Duration;

use jobs::WorkerConfig;

use crate::support::{fast_config, start_worker, wait_until, Db};
use crate::test_jobs::{record_run, waits_for_release};

async fn create_releases(db: &Db) {
    sqlx::query("CREATE TABLE releases (job_id bigint PRIMARY KEY)")
        .execute(&db.pool)
        .await
        .unwrap();
}

async fn release(db: &Db, id: i64) {
    sqlx::query("INSERT INTO releases (job_id) VALUES ($1)")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap();
}

async fn lease_expiry(db: &Db, id: i64) -> Option<f64> {
    sqlx::query_scalar(
        "SELECT extract(epoch FROM lease_expires_at)::float8 FROM jobs_queue WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_the_lease_of_a_job_that_outlasts_it() {
    let db = Db::new().await;
    create_releases(&db).await;
    let id = waits_for_release::enqueue(&db.pool).await.unwrap().id();
    let config = WorkerConfig {
        lease: Duration::from_millis(600),
        heartbeat_interval: Duration::from_millis(150),
        ..fast_config()
    };
    let worker = start_worker(&db.pool, &["waits_for_release"], config);
    db.wait_for_state(id, "running").await;
    let first_expiry = lease_expiry(&db, id).await.unwrap();
    // Wait until the first lease is over by the database clock, and the job still holds one.
    wait_until("the original lease to pass", || {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, bool>("SELECT extract(epoch FROM now())::float8 > $1 + 0.3")
                .bind(first_expiry)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    })
    .await;
    let job = db.job(id).await;
    assert_eq!((job.state.as_str(), job.attempts), ("running", 1));
    assert!(lease_expiry(&db, id).await.unwrap() > first_expiry);
    release(&db, id).await;
    let job = db.wait_for_state(id, "done").await;
    worker.shutdown().await.expect("the worker stops");
    assert_eq!(job.attempts, 1);
    assert!(job.errors.is_empty());
}

/// Simulates a worker that claimed the job and died: running, with a lease already expired.
async fn abandon(db: &Db, id: i64, attempts: i32) {
    sqlx::query(
        "UPDATE jobs_queue SET state = 'running', attempts = $2, lease_token = gen_random_uuid(),
                lease_expires_at = now() - interval '1 second' WHERE id = $1",
    )
    .bind(id)
    .bind(attempts)
    .execute(&db.pool)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_workers_job_is_rescued_and_run_again() {
    let db = Db::new().await;
    let id = record_run::enqueue(&db.pool, "orphan".into())
        .await
        .unwrap()
        .id();
    abandon(&db, id, 1).await;
    let worker = db.start_worker(&["record_run"]);
    let job = db.wait_for_state(id, "done").await;
    worker.shutdown().await.expect("the worker stops");
    assert_eq!(job.attempts, 2);
    assert_eq!(job.errors.len(), 1);
    assert_eq!(job.errors[0].kind, "lease_expired");
    assert_eq!(job.errors[0].attempt, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_keeps_killing_its_worker_ends_dead() {
    let db = Db::new().await;
    let id = record_run::enqueue(&db.pool, "poison".into())
        .await
        .unwrap()
        .id();
    abandon(&db, id, 8).await;
    let worker = db.start_worker(&["record_run"]);
    let job = db.wait_for_state(id, "dead").await;
    worker.shutdown().await.expect("the worker stops");
    assert_eq!(job.errors[0].kind, "lease_expired");
    assert_eq!(db.count("SELECT count(*) FROM runs").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_lost_its_lease_cannot_complete_the_job() {
    let db = Db::new().await;
    create_releases(&db).await;
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
    release(&db, id).await;
    // Shutdown waits until the first worker has tried to record its outcome.
    worker.shutdown().await.expect("the worker stops");
    let (state, token): (String, uuid::Uuid) =
        sqlx::query_as("SELECT state, lease_token FROM jobs_queue WHERE id = $1")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        state, "running",
        "the stale worker must not complete the job"
    );
    assert_eq!(token, new_token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_survives_its_connections_being_killed() {
    let db = Db::new().await;
    let first = record_run::enqueue(&db.pool, "before".into())
        .await
        .unwrap()
        .id();
    let worker_pool = db.other_pool(5).await;
    let worker = start_worker(&worker_pool, &["record_run"], fast_config());
    db.wait_for_state(first, "done").await;
    let killed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()) AS killed",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(killed > 0);
    let second = record_run::enqueue(&db.pool, "after".into())
        .await
        .unwrap()
        .id();
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
    let normal = record_run::enqueue(&db.pool, "normal".into())
        .await
        .unwrap()
        .id();
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
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, f64>(
                "SELECT extract(epoch FROM lease_expires_at - attempted_at)::float8 FROM jobs_queue WHERE id = $1",
            )
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    assert!((lease_of(short).await - 1.0).abs() < 0.01);
    assert!((lease_of(normal).await - 30.0).abs() < 0.01);
}
