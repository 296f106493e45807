//! The job kinds the tests run. Each test's worker runs only the kinds it names.

use std::time::Duration;

use jobs::{
    job, ClassifyError, ErrorClass, JobContext, JobContextExt, JobError, JobId, JobResult, State,
};
use sqlx::PgPool;

use crate::support::Db;

async fn record(pool: &PgPool, ctx: &JobContext) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO runs (job_id, attempt) VALUES ($1, $2)")
        .bind(ctx.id())
        .bind(i32::try_from(ctx.attempt()).unwrap_or(i32::MAX))
        .execute(pool)
        .await
        .map(drop)
}

/// Enqueues a [`record_run`] job labelled `label`; returns its id.
pub async fn enqueue_record_run(db: &Db, label: &str) -> JobId {
    record_run::enqueue(&db.pool, label.to_owned())
        .await
        .expect("enqueue record_run")
        .id()
}

/// Inserts `count` ready [`record_run`] jobs labelled `label` with plain SQL (nothing
/// announced), the first due since `first_due` (an SQL interval) ago and each next one `every`
/// (an SQL interval) later.
pub async fn insert_due_record_runs(
    db: &Db,
    count: i64,
    label: &str,
    first_due: &str,
    every: &str,
) {
    sqlx::query(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, run_at)
         SELECT 'record_run', 'default', jsonb_build_object('label', $2::text), 8,
                now() - $3::interval + n * $4::interval
         FROM generate_series(1, $1) AS n",
    )
    .bind(count)
    .bind(label)
    .bind(first_due)
    .bind(every)
    .execute(&db.pool)
    .await
    .unwrap();
}

/// Enqueues a [`record_run`] job labelled `label` and makes it look claimed by a worker that
/// died after `attempts` attempts (see [`Db::abandon`]); returns its id.
pub async fn orphaned_record_run(db: &Db, label: &str, attempts: i32) -> JobId {
    let id = enqueue_record_run(db, label).await;
    db.abandon(id, attempts).await;
    id
}

/// Records each run in `runs`.
#[job]
pub async fn record_run(ctx: JobContext, pool: State<PgPool>, label: String) -> JobResult {
    let _ = label;
    record(&pool, &ctx).await?;
    Ok(())
}

/// Records each run in `runs`, with at most two running at once across all workers.
#[job(max_running = 2)]
pub async fn limited_record(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    record(&pool, &ctx).await?;
    Ok(())
}

/// Records each run in `runs`, with at most 10 started in any 200 ms across all workers.
#[job(rate_limit = "10/200ms")]
pub async fn rate_limited_record(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    record(&pool, &ctx).await?;
    Ok(())
}

/// Fails transiently on its first `failures` attempts, then succeeds.
#[job(max_attempts = 5, backoff_base = "10ms", backoff_max = "40ms")]
pub async fn flaky(ctx: JobContext, pool: State<PgPool>, failures: u32) -> JobResult {
    record(&pool, &ctx).await?;
    if ctx.attempt() <= failures {
        return Err(JobError::transient(format!(
            "outage, attempt {}",
            ctx.attempt()
        )));
    }
    Ok(())
}

/// Always fails transiently.
#[job(max_attempts = 3, backoff_base = "10ms", backoff_max = "20ms")]
pub async fn always_failing(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    record(&pool, &ctx).await?;
    Err(std::io::Error::other("connection refused"))?
}

/// Fails once with the default backoff, to check the retry schedule.
#[job]
pub async fn default_backoff(ctx: JobContext) -> JobResult {
    Err(JobError::transient(format!(
        "attempt {} failed",
        ctx.attempt()
    )))
}

/// Fails permanently.
#[job(max_attempts = 8)]
pub async fn bad_input(email: String) -> JobResult {
    Err(JobError::permanent(format!(
        "`{email}` is not an email address"
    )))
}

/// The card was declined: a classified error, permanent wherever `?` meets it.
#[derive(Debug, thiserror::Error)]
#[error("card declined")]
pub struct CardDeclined;

#[jobs::error_class]
impl ClassifyError for CardDeclined {
    fn class(&self) -> ErrorClass {
        ErrorClass::Permanent
    }
}

/// Charges a card that is always declined.
#[job(max_attempts = 8)]
pub async fn charge_card(amount_cents: i64) -> Result<(), CardDeclined> {
    let _ = amount_cents;
    Err(CardDeclined)
}

/// Panics on its first attempt, succeeds on the next.
#[job(max_attempts = 3, backoff_base = "10ms")]
pub async fn panics_once(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    record(&pool, &ctx).await?;
    if ctx.attempt() == 1 {
        panic!("invariant broken on first attempt");
    }
    Ok(())
}

/// Never finishes within its timeout.
#[job(max_attempts = 1, timeout = "100ms")]
pub async fn too_slow() -> JobResult {
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(())
}

/// Snoozes on its first run, then completes.
#[job(max_attempts = 1)]
pub async fn snoozes_once(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM runs WHERE job_id = $1")
        .bind(ctx.id())
        .fetch_one(&*pool)
        .await?;
    record(&pool, &ctx).await?;
    if runs == 0 {
        return Err(JobError::snooze(Duration::from_millis(10)));
    }
    Ok(())
}

/// Cancels itself.
#[job]
pub async fn cancels() -> JobResult {
    Err(JobError::cancel("order was refunded"))
}

/// A receipt, deduplicated per order for as long as the row exists.
#[job(dedupe = "receipt:<order_id>")]
pub async fn send_receipt(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

/// A sync, deduplicated per user only while one is pending.
#[job(
    dedupe = "sync:<user_id>",
    dedupe_scope = "active",
    queue = "sync",
    priority = 3
)]
pub async fn sync_user(user_id: i64) -> JobResult {
    let _ = user_id;
    Ok(())
}

/// Waits for shutdown, then completes: a job that finishes within the grace period.
#[job]
pub async fn finishes_on_shutdown(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    record(&pool, &ctx).await?;
    ctx.shutdown_signal().await;
    Ok(())
}

/// Ignores shutdown: a job that outlasts the grace period.
#[job]
pub async fn ignores_shutdown(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    record(&pool, &ctx).await?;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(())
}

/// Needs a state value that tests do not always give.
pub struct Mailer;

/// Needs `State<Mailer>`.
#[job]
pub async fn needs_mailer(mailer: State<Mailer>, to: String) -> JobResult {
    let _ = (mailer, to);
    Ok(())
}

/// Runs until the test inserts its id into `releases`: a long job whose length the test decides.
#[job]
pub async fn waits_for_release(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    record(&pool, &ctx).await?;
    released(&pool, &ctx).await?;
    Ok(())
}

/// Returns once the test has inserted the id of the job `ctx` runs into `releases`, looking
/// every 20 ms.
pub async fn released(pool: &PgPool, ctx: &JobContext) -> Result<(), sqlx::Error> {
    loop {
        let released: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM releases WHERE job_id = $1)")
                .bind(ctx.id())
                .fetch_one(pool)
                .await?;
        if released {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A kind with its own lease and heartbeat.
#[job(lease = "1s", heartbeat = "200ms")]
pub async fn short_lease(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    record(&pool, &ctx).await?;
    Ok(())
}

/// The first of a chain of `links` jobs: enqueues the next link in its own transaction, which
/// completes it.
#[job]
pub async fn chain(ctx: JobContext, links: u32) -> JobResult {
    let mut tx = ctx.transaction().await?;
    if links > 1 {
        chain::enqueue_in(&mut tx, links - 1).await?;
    }
    tx.complete().await?;
    Ok(())
}

/// Runs until an operator asks to cancel it (checking `ctx.cancel_requested()` between steps),
/// then stops with a transient error, which would otherwise be retried, or, with `succeed`,
/// ignores the request and succeeds. Heartbeats often, so the request is seen quickly.
#[job(
    max_attempts = 5,
    heartbeat = "100ms",
    backoff_base = "10ms",
    backoff_max = "20ms"
)]
pub async fn stops_when_cancelled(
    ctx: JobContext,
    pool: State<PgPool>,
    succeed: bool,
) -> JobResult {
    record(&pool, &ctx).await?;
    while !ctx.cancel_requested() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if succeed {
        Ok(())
    } else {
        Err(JobError::transient("stopped: cancellation requested"))
    }
}

/// Runs until the test inserts its id into `releases`, then fails with a transient error
/// (retried within milliseconds), never looking at cancellation requests.
#[job(max_attempts = 5, backoff_base = "10ms", backoff_max = "20ms")]
pub async fn fails_when_released(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    record(&pool, &ctx).await?;
    loop {
        let released: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM releases WHERE job_id = $1)")
                .bind(ctx.id())
                .fetch_one(&*pool)
                .await?;
        if released {
            return Err(JobError::transient("failed after its release"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs until an operator asks to cancel it, then stops with a transient error; with the
/// worker's own heartbeat interval (no faster one of its kind).
#[job(max_attempts = 5, backoff_base = "10ms", backoff_max = "20ms")]
pub async fn waits_for_cancel(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    record(&pool, &ctx).await?;
    ctx.cancel_signal().await;
    Err(JobError::transient("stopped: cancellation requested"))
}

/// Does nothing, for tenant `tenant`; its jobs are claimed round-robin across tenants.
#[job(fair_key = "tenant:<tenant>")]
pub async fn tenant_task(tenant: String, n: u32) -> JobResult {
    let _ = (tenant, n);
    Ok(())
}

/// Records each run and works `millis` ms, with at most 2 running per merchant across all
/// workers.
#[job(limit_key = "<merchant>", max_running_per_key = 2)]
pub async fn per_merchant(
    ctx: JobContext,
    pool: State<PgPool>,
    merchant: String,
    millis: u64,
) -> JobResult {
    let _ = merchant;
    record(&pool, &ctx).await?;
    tokio::time::sleep(Duration::from_millis(millis)).await;
    Ok(())
}

/// Does nothing, with at most 2 running per merchant across all workers.
#[job(limit_key = "<merchant>", max_running_per_key = 2)]
pub async fn merchant_task(merchant: String, n: u32) -> JobResult {
    let _ = (merchant, n);
    Ok(())
}

/// Records each run, with at most 3 started per merchant in any 300 ms across all workers.
#[job(limit_key = "<merchant>", rate_limit_per_key = "3/300ms")]
pub async fn per_merchant_rated(
    ctx: JobContext,
    pool: State<PgPool>,
    merchant: String,
) -> JobResult {
    let _ = merchant;
    record(&pool, &ctx).await?;
    Ok(())
}
