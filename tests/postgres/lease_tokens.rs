//! A worker that lost a job's lease and claimed the same job again runs two runs of it at once:
//! each is tracked under its own lease token, so the stale run cannot touch the live one.

use std::time::Duration;

use jobs::{job, JobContext, JobError, JobResult, State};
use sqlx::PgPool;

use crate::support::{leased_config, start_worker, Db};

/// Records each run, waits until the test releases this attempt, then renews its own lease
/// (failing when the worker no longer holds it for this run) and completes.
#[job(max_attempts = 5)]
pub async fn waits_for_attempt_release(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    let attempt = i32::try_from(ctx.attempt()).unwrap_or(i32::MAX);
    sqlx::query("INSERT INTO runs (job_id, attempt) VALUES ($1, $2)")
        .bind(ctx.id())
        .bind(attempt)
        .execute(&*pool)
        .await?;
    loop {
        let released: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM attempt_releases WHERE job_id = $1 AND attempt = $2)",
        )
        .bind(ctx.id())
        .bind(attempt)
        .fetch_one(&*pool)
        .await?;
        if released {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if !ctx.is_lease_lost() {
        ctx.renew_lease()
            .await
            .map_err(|error| JobError::transient(format!("renewal failed: {error}")))?;
    }
    Ok(())
}

/// Lets attempt `attempt` of job `id` finish.
async fn release(db: &Db, id: i64, attempt: i32) {
    sqlx::query("INSERT INTO attempt_releases (job_id, attempt) VALUES ($1, $2)")
        .bind(id)
        .bind(attempt)
        .execute(&db.pool)
        .await
        .unwrap();
}

/// Waits until attempt `attempt` of job `id` has recorded its run.
async fn wait_for_run(db: &Db, id: i64, attempt: i32) {
    db.wait_for_count_at_least(
        &format!("attempt {attempt} of job {id} to run"),
        &format!("SELECT count(*) FROM runs WHERE job_id = {id} AND attempt = {attempt}"),
        1,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_run_of_a_job_claimed_again_leaves_the_live_run_alone() {
    let db = Db::new().await;
    db.execute("CREATE TABLE attempt_releases (job_id bigint NOT NULL, attempt integer NOT NULL)")
        .await;
    let id = waits_for_attempt_release::enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    let config = leased_config(Duration::from_secs(1), Duration::from_millis(150));
    let worker = start_worker(&db.pool, &["waits_for_attempt_release"], config);
    wait_for_run(&db, id, 1).await;

    // The lease is lost while the first run goes on, as a rescue does it: ready again, the token
    // gone. The same worker claims the job again.
    sqlx::query(
        "UPDATE jobs_queue SET state = 'ready', lease_token = NULL, lease_expires_at = NULL,
                errors = errors || jsonb_build_array(jsonb_build_object(
                    'attempt', attempts, 'at', now(), 'kind', 'lease_expired', 'error', 'test'))
         WHERE id = $1",
    )
    .bind(id)
    .execute(&db.pool)
    .await
    .unwrap();
    wait_for_run(&db, id, 2).await;

    // The stale run finishes: its outcome is dropped, and nothing of it touches the live run.
    release(&db, id, 1).await;
    let expiry_then = db
        .lease_expiry(id)
        .await
        .expect("the live run holds a lease");
    // Past the live run's lease as it stood then: it must have been renewed meanwhile.
    db.wait_for_clock_past(
        "the live run's lease as of the stale run's end to pass",
        expiry_then,
        0.3,
    )
    .await;
    let job = db.job(id).await;
    assert_eq!(
        (job.state.as_str(), job.attempts),
        ("running", 2),
        "the live run is still running under its claim"
    );
    let expiry_now = db.lease_expiry(id).await.expect("still leased");
    assert!(
        expiry_now > expiry_then,
        "the live run is heartbeated ({expiry_now} > {expiry_then})"
    );

    release(&db, id, 2).await;
    let job = db.wait_for_state(id, "done").await;
    worker.shutdown().await.expect("the worker stops");
    assert_eq!(job.attempts, 2);
    assert_eq!(
        job.errors.len(),
        1,
        "only the simulated rescue: {:?}",
        job.errors
    );
    assert_eq!(db.runs_of(id).await, 2);
}
