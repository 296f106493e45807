//! Which `max_attempts` counts after a deploy that changed it: the one the job's row holds, on
//! every path (the retry decision, `ctx.is_last_attempt()`, the rescue).

use jobs::{job, JobContext, JobError, JobResult, Registry, State, Worker};
use sqlx::PgPool;

use crate::support::{fast_config, Db};

async fn note_attempt(pool: &PgPool, ctx: &JobContext) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO attempt_notes (job_id, attempt, last) VALUES ($1, $2, $3)")
        .bind(ctx.id())
        .bind(i32::try_from(ctx.attempt()).unwrap_or(i32::MAX))
        .bind(ctx.is_last_attempt())
        .execute(pool)
        .await
        .map(drop)
}

/// Enqueued with 2 attempts, run by a worker whose code says 5.
#[job(max_attempts = 2, backoff_base = "10ms", backoff_max = "20ms")]
pub async fn fails_with_two_attempts(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    note_attempt(&pool, &ctx).await?;
    Err(JobError::transient("still failing"))
}

/// Enqueued with 5 attempts, run by a worker whose code says 2.
#[job(max_attempts = 5, backoff_base = "10ms", backoff_max = "20ms")]
pub async fn fails_with_five_attempts(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    note_attempt(&pool, &ctx).await?;
    Err(JobError::transient("still failing"))
}

/// Runs `id` of `kind` to its end on a worker whose registration of the kind says
/// `deployed_max_attempts`; returns the job's final attempts and, per run, whether its context
/// said it was the last attempt.
async fn run_after_deploy(
    db: &Db,
    id: i64,
    kind: &str,
    deployed_max_attempts: u32,
) -> (i32, Vec<bool>) {
    let mut deployed = Registry::collect().unwrap().get(kind).copied().unwrap();
    deployed.options.retry.max_attempts = deployed_max_attempts;
    let worker = Worker::builder(db.pool.clone())
        .registrations([deployed])
        .state(db.pool.clone())
        .config(fast_config())
        .build()
        .unwrap()
        .start();
    let job = db.wait_for_state(id, "dead").await;
    worker.shutdown().await.expect("the worker stops");
    let lasts: Vec<bool> = db
        .column(&format!(
            "SELECT last FROM attempt_notes WHERE job_id = {id} ORDER BY attempt"
        ))
        .await;
    (job.attempts, lasts)
}

/// A database with the `attempt_notes` table where the jobs here note each attempt.
async fn db_with_attempt_notes() -> Db {
    let db = Db::new().await;
    db.execute(
        "CREATE TABLE attempt_notes (job_id bigint NOT NULL, attempt integer NOT NULL, last boolean NOT NULL)",
    )
    .await;
    db
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_raising_max_attempts_does_not_change_a_queued_jobs_count() {
    let db = db_with_attempt_notes().await;
    let id = fails_with_two_attempts::enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    assert_eq!(db.job(id).await.max_attempts, 2);
    let (attempts, lasts) = run_after_deploy(&db, id, "fails_with_two_attempts", 5).await;
    assert_eq!(attempts, 2, "dead after the row's count");
    assert_eq!(lasts, [false, true], "the context agrees with the decision");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_lowering_max_attempts_does_not_change_a_queued_jobs_count() {
    let db = db_with_attempt_notes().await;
    let id = fails_with_five_attempts::enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    assert_eq!(db.job(id).await.max_attempts, 5);
    let (attempts, lasts) = run_after_deploy(&db, id, "fails_with_five_attempts", 2).await;
    assert_eq!(attempts, 5, "dead after the row's count");
    assert_eq!(
        lasts,
        [false, false, false, false, true],
        "the context agrees with the decision"
    );
}
