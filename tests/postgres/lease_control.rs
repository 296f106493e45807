//! A job's own hold on its lease (`ctx.renew_lease()`, `ctx.lease_lost()`), and stopping a
//! worker at once.

use std::time::{Duration, Instant};

use jobs::{job, JobContext, JobResult, LeaseError, State};
use sqlx::PgPool;

use crate::support::{fast_config, leased_config, start_worker, Db};

async fn lease_expiry(pool: &PgPool, id: i64) -> Result<f64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT extract(epoch FROM lease_expires_at)::float8 FROM jobs_queue WHERE id = $1",
    )
    .bind(id)
    .fetch_one(pool)
    .await
}

async fn note(pool: &PgPool, ctx: &JobContext, what: &str) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO notes (job_id, what) VALUES ($1, $2)")
        .bind(ctx.id())
        .bind(what)
        .execute(pool)
        .await
        .map(drop)
}

/// Renews its lease and notes whether the expiry moved; then waits until the worker says the
/// lease is lost, and notes what a renewal says then.
#[job(max_attempts = 1)]
pub async fn renews_then_waits(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    let before = lease_expiry(&pool, ctx.id()).await?;
    let renewed = ctx.renew_lease().await;
    let after = lease_expiry(&pool, ctx.id()).await?;
    note(
        &pool,
        &ctx,
        &format!("renewed: {renewed:?}, moved: {}", after > before),
    )
    .await?;
    ctx.lease_lost().await;
    let again = match ctx.renew_lease().await {
        Err(LeaseError::Lost) => "lost",
        Err(_) => "other error",
        Ok(()) => "renewed",
    };
    note(
        &pool,
        &ctx,
        &format!("after loss: {again}, flag: {}", ctx.is_lease_lost()),
    )
    .await?;
    Ok(())
}

/// Notes its start, then sleeps for an hour, ignoring shutdown.
#[job(max_attempts = 3)]
pub async fn sleeps_an_hour(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    note(&pool, &ctx, "started").await?;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(())
}

async fn create_notes(db: &Db) {
    db.execute("CREATE TABLE notes (job_id bigint NOT NULL, what text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())").await;
}

async fn notes(db: &Db) -> Vec<String> {
    db.column("SELECT what FROM notes ORDER BY at").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_renews_its_own_lease_and_hears_when_it_is_lost() {
    let db = Db::new().await;
    create_notes(&db).await;
    let id = renews_then_waits::enqueue(&db.pool).await.unwrap().id();
    let config = leased_config(Duration::from_secs(5), Duration::from_secs(1));
    let worker = start_worker(&db.pool, &["renews_then_waits"], config);
    db.wait_for_count(
        "the job to renew its lease",
        "SELECT count(*) FROM notes",
        1,
    )
    .await;
    // Another worker takes the job over (as after a rescue and a new claim).
    db.take_over(id).await;
    db.wait_for_count(
        "the job to hear its lease is lost",
        "SELECT count(*) FROM notes",
        2,
    )
    .await;
    worker.shutdown().await.expect("the worker stops");
    assert_eq!(
        notes(&db).await,
        [
            "renewed: Ok(()), moved: true",
            "after loss: lost, flag: true"
        ]
    );
    let job = db.job(id).await;
    assert_eq!(job.state, "running", "the stale run recorded nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_now_leaves_running_jobs_to_their_leases() {
    let db = Db::new().await;
    create_notes(&db).await;
    let id = sleeps_an_hour::enqueue(&db.pool).await.unwrap().id();
    let worker = start_worker(&db.pool, &["sleeps_an_hour"], fast_config());
    db.wait_for_state(id, "running").await;
    db.wait_for_count("the job to start", "SELECT count(*) FROM notes", 1)
        .await;
    let stopping = Instant::now();
    worker.stop_now().await.expect("the worker stops");
    assert!(stopping.elapsed() < Duration::from_secs(1), "stops at once");
    let job = db.job(id).await;
    assert_eq!((job.state.as_str(), job.attempts), ("running", 1));
    assert!(job.errors.is_empty());
    let leased_for: f64 = db
        .job_value(id, "extract(epoch FROM lease_expires_at - now())::float8")
        .await;
    assert!(
        leased_for > 0.0,
        "the lease still holds: the job was not handed back"
    );
}
