//! Exactly-once effects for database work: transactional completion, processed keys, and the
//! stable idempotency key.

use std::sync::Arc;
use std::time::Duration;

use jobs::postgres::{
    is_processed, mark_processed, JobContextExt, JobTransaction, ProcessedKey, ProcessedKeyError,
    TransactionError,
};
use jobs::{job, JobContext, JobError, JobResult, State, Worker};
use sqlx::PgPool;
use tokio::sync::Notify;

use jobs::postgres::__private::sql;

use crate::plans::{assert_no_seq_scan, explain_analyze, plan_nodes, plan_of, scans_of};
use crate::support::{fast_config, Db};

/// A database with the tables the jobs here write: receipts, refunds, and notes that survive
/// rollbacks.
async fn db_with_tables() -> Db {
    let db = Db::new().await;
    for statement in [
        "CREATE TABLE receipts (order_id bigint NOT NULL, job_id bigint NOT NULL)",
        "CREATE TABLE refunds (order_id bigint NOT NULL)",
        "CREATE TABLE notes (job_id bigint NOT NULL, attempt integer NOT NULL, what text NOT NULL)",
    ] {
        db.execute(statement).await;
    }
    db
}

/// Opens the job's transaction and inserts a receipt for `order_id` in it.
async fn transaction_with_receipt(
    ctx: &JobContext,
    order_id: i64,
) -> Result<JobTransaction, JobError> {
    let mut tx = ctx.transaction().await?;
    sqlx::query("INSERT INTO receipts (order_id, job_id) VALUES ($1, $2)")
        .bind(order_id)
        .bind(ctx.id())
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

/// Notes `what` outside any job transaction, so the note survives rollbacks.
async fn note(pool: &PgPool, ctx: &JobContext, what: &str) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO notes (job_id, attempt, what) VALUES ($1, $2, $3)")
        .bind(ctx.id())
        .bind(i32::try_from(ctx.attempt()).unwrap())
        .bind(what)
        .execute(pool)
        .await
        .map(drop)
}

async fn notes(db: &Db) -> Vec<String> {
    db.column("SELECT what FROM notes ORDER BY job_id, attempt")
        .await
}

/// Inserts a receipt and completes in the same transaction.
#[job]
pub async fn record_receipt(ctx: JobContext, order_id: i64) -> JobResult {
    let tx = transaction_with_receipt(&ctx, order_id).await?;
    tx.complete().await?;
    Ok(())
}

/// Inserts a receipt in its transaction, then fails on the first attempt; completes on the
/// second.
#[job(max_attempts = 3, backoff_base = "10ms", backoff_max = "10ms")]
pub async fn receipt_fails_once(ctx: JobContext, pool: State<PgPool>, order_id: i64) -> JobResult {
    note(&pool, &ctx, "ran").await?;
    let tx = transaction_with_receipt(&ctx, order_id).await?;
    if ctx.attempt() == 1 {
        return Err(JobError::transient("the provider hung up"));
    }
    tx.complete().await?;
    Ok(())
}

/// Lets a test step in between a job's effects and its completion.
#[derive(Default)]
pub struct Gate {
    inserted: Notify,
    proceed: Notify,
}

/// Inserts a receipt, waits for the test to take its lease over, then tries to complete.
#[job(max_attempts = 1)]
pub async fn receipt_after_takeover(
    ctx: JobContext,
    pool: State<PgPool>,
    gate: State<Gate>,
    order_id: i64,
) -> JobResult {
    let tx = transaction_with_receipt(&ctx, order_id).await?;
    gate.inserted.notify_one();
    gate.proceed.notified().await;
    let completed = tx.complete().await;
    note(&pool, &ctx, &format!("{completed:?}")).await?;
    completed?;
    Ok(())
}

/// Refunds an order once, however many jobs ask for it.
#[job]
pub async fn refund(ctx: JobContext, pool: State<PgPool>, order_id: i64) -> JobResult {
    let mut tx = ctx.transaction().await?;
    let key = mark_processed(&mut tx, &format!("refund:{order_id}"), None).await?;
    note(&pool, &ctx, &format!("{key:?}")).await?;
    if key.is_new() {
        sqlx::query("INSERT INTO refunds (order_id) VALUES ($1)")
            .bind(order_id)
            .execute(&mut *tx)
            .await?;
    }
    tx.complete().await?;
    Ok(())
}

/// Forgets to complete its transaction.
#[job(max_attempts = 5)]
pub async fn forgets_to_complete(ctx: JobContext, order_id: i64) -> JobResult {
    // Held until the job returns, then dropped open.
    let _tx = transaction_with_receipt(&ctx, order_id).await?;
    Ok(())
}

/// Rolls its transaction back on purpose and succeeds.
#[job]
pub async fn rolls_back_on_purpose(ctx: JobContext, order_id: i64) -> JobResult {
    let tx = transaction_with_receipt(&ctx, order_id).await?;
    tx.rollback().await?;
    Ok(())
}

/// Notes its idempotency key on every attempt and fails the first two.
#[job(max_attempts = 3, backoff_base = "10ms", backoff_max = "10ms")]
pub async fn charge(ctx: JobContext, pool: State<PgPool>, order_id: i64) -> JobResult {
    let _ = order_id;
    note(&pool, &ctx, &ctx.idempotency_key()).await?;
    if ctx.attempt() < 3 {
        return Err(JobError::transient("payment provider timed out"));
    }
    Ok(())
}

/// Like `charge`, with a dedupe key.
#[job(
    max_attempts = 2,
    backoff_base = "10ms",
    backoff_max = "10ms",
    dedupe = "charge:<order_id>"
)]
pub async fn keyed_charge(ctx: JobContext, pool: State<PgPool>, order_id: i64) -> JobResult {
    let _ = order_id;
    note(&pool, &ctx, &ctx.idempotency_key()).await?;
    if ctx.attempt() < 2 {
        return Err(JobError::transient("payment provider timed out"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn effects_and_completion_commit_in_one_transaction() {
    let db = db_with_tables().await;
    let id = record_receipt::enqueue(&db.pool, 1042).await.unwrap().id();
    let job = db.run_until(&["record_receipt"], id, "done").await;
    assert_eq!(job.attempts, 1);
    // The same transaction id wrote the receipt and the job's final row version.
    let (receipt_xmin, job_xmin): (String, String) = sqlx::query_as(
        "SELECT (SELECT xmin::text FROM receipts), (SELECT xmin::text FROM jobs_queue WHERE id = $1)",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(receipt_xmin, job_xmin);
    assert_eq!(
        db.count("SELECT count(*) FROM receipts WHERE order_id = 1042")
            .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_rolls_the_effects_back_and_the_job_is_retried() {
    let db = db_with_tables().await;
    let id = receipt_fails_once::enqueue(&db.pool, 7).await.unwrap().id();
    let job = db.run_until(&["receipt_fails_once"], id, "done").await;
    assert_eq!(job.attempts, 2);
    assert_eq!(job.errors.0.len(), 1);
    assert_eq!(job.errors.0[0].error, "the provider hung up");
    assert_eq!(notes(&db).await, ["ran", "ran"]);
    let receipts: Vec<(i64, i64)> = db.rows("SELECT order_id, job_id FROM receipts").await;
    assert_eq!(receipts, [(7, id)], "only the second attempt's receipt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_lease_was_taken_over_cannot_commit() {
    let db = db_with_tables().await;
    let gate = Arc::new(Gate::default());
    let id = receipt_after_takeover::enqueue(&db.pool, 9)
        .await
        .unwrap()
        .id();
    let worker = Worker::builder(db.pool.clone())
        .kinds(["receipt_after_takeover"])
        .state(db.pool.clone())
        .shared_state(Arc::clone(&gate))
        .config(fast_config())
        .build()
        .unwrap()
        .start();
    gate.inserted.notified().await;
    // Another worker takes the job over (as after a rescue and a new claim).
    let new_token = db.take_over(id).await;
    gate.proceed.notify_one();
    db.wait_for_count(
        "the job to try to complete",
        "SELECT count(*) FROM notes",
        1,
    )
    .await;
    worker.shutdown().await.expect("the worker stops");
    assert_eq!(
        notes(&db).await,
        [format!("{:?}", Err::<(), _>(TransactionError::LeaseLost))]
    );
    assert_eq!(db.count("SELECT count(*) FROM receipts").await, 0);
    let (state, token) = db.state_and_token(id).await;
    assert_eq!(
        (state.as_str(), token),
        ("running", Some(new_token)),
        "the job belongs to its new holder, untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_processed_key_makes_the_second_job_skip_its_effect() {
    let db = db_with_tables().await;
    let first = refund::enqueue(&db.pool, 5).await.unwrap().id();
    let second = refund::enqueue(&db.pool, 5).await.unwrap().id();
    let [_, _] = db
        .run_until_each(&["refund"], [(first, "done"), (second, "done")])
        .await;
    assert_eq!(db.count("SELECT count(*) FROM refunds").await, 1);
    let mut seen = notes(&db).await;
    seen.sort();
    assert_eq!(seen, ["AlreadyProcessed", "New"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returning_ok_after_dropping_the_transaction_open_is_a_dead_job() {
    let db = db_with_tables().await;
    let forgot = forgets_to_complete::enqueue(&db.pool, 1)
        .await
        .unwrap()
        .id();
    let on_purpose = rolls_back_on_purpose::enqueue(&db.pool, 2)
        .await
        .unwrap()
        .id();
    let [dead, _] = db
        .run_until_each(
            &["forgets_to_complete", "rolls_back_on_purpose"],
            [(forgot, "dead"), (on_purpose, "done")],
        )
        .await;
    assert_eq!(dead.attempts, 1, "a bug is not retried");
    assert_eq!(dead.errors.0[0].kind, "permanent");
    assert!(
        dead.errors.0[0]
            .error
            .contains("dropped its transaction without complete() or rollback()"),
        "{}",
        dead.errors.0[0].error
    );
    assert_eq!(db.count("SELECT count(*) FROM receipts").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idempotency_key_is_the_same_on_every_attempt() {
    let db = db_with_tables().await;
    let plain = charge::enqueue(&db.pool, 3).await.unwrap().id();
    let keyed = keyed_charge::enqueue(&db.pool, 3).await.unwrap().id();
    let [_, _] = db
        .run_until_each(
            &["charge", "keyed_charge"],
            [(plain, "done"), (keyed, "done")],
        )
        .await;
    let keys_of = |id: i64| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, String>(
                "SELECT what FROM notes WHERE job_id = $1 ORDER BY attempt",
            )
            .bind(id)
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    // The row's enqueue time, in microseconds: the same job id in another database (or after
    // a restore) has another.
    let enqueued_micros: i64 = db
        .job_value(plain, "(extract(epoch FROM created_at) * 1000000)::bigint")
        .await;
    let plain_key = format!("charge#job:{plain}:{enqueued_micros}");
    assert_eq!(keys_of(plain).await, [plain_key.as_str(); 3]);
    assert_eq!(
        keys_of(keyed).await,
        ["keyed_charge#key:charge:3", "keyed_charge#key:charge:3"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_marked_by_an_open_transaction_waits_for_its_outcome() {
    let db = Db::new().await;
    let key = "import:2026-11";
    for (first_commits, second_sees) in [
        (false, ProcessedKey::New),
        (true, ProcessedKey::AlreadyProcessed),
    ] {
        db.execute("DELETE FROM jobs_processed_keys").await;
        let mut first = db.pool.begin().await.unwrap();
        assert_eq!(
            mark_processed(&mut first, key, None).await.unwrap(),
            ProcessedKey::New
        );
        let pool = db.pool.clone();
        let second = tokio::spawn(async move {
            let mut second = pool.begin().await.unwrap();
            let seen = mark_processed(&mut second, key, None).await.unwrap();
            second.commit().await.unwrap();
            seen
        });
        db.wait_for_count("the second transaction to wait for the first", "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%jobs_processed_keys%'", 1).await;
        if first_commits {
            first.commit().await.unwrap();
        } else {
            first.rollback().await.unwrap();
        }
        assert_eq!(second.await.unwrap(), second_sees);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_any_length_are_recorded_and_told_apart() {
    let db = Db::new().await;
    let mut connection = db.pool.acquire().await.unwrap();
    // Past the ~2.7 kB a btree entry can hold: keys come from URLs and free text.
    let long = format!("sent:{}", "https://example.com/".repeat(500));
    let longer_by_one = format!("{long}x");
    for key in [&long, &longer_by_one] {
        assert!(mark_processed(&mut connection, key, None)
            .await
            .unwrap()
            .is_new());
    }
    assert_eq!(
        mark_processed(&mut connection, &long, None).await.unwrap(),
        ProcessedKey::AlreadyProcessed
    );
    assert!(is_processed(&mut connection, &longer_by_one).await.unwrap());
    assert!(!is_processed(&mut connection, &format!("{long}y"))
        .await
        .unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_the_database_cannot_store_is_refused_and_the_callers_work_survives() {
    let db = db_with_tables().await;
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("INSERT INTO refunds (order_id) VALUES (7)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let refused = mark_processed(&mut tx, "refund:\0:7", None).await;
    assert!(
        matches!(refused, Err(ProcessedKeyError::KeyHoldsNul { at: 7 })),
        "{refused:?}"
    );
    let refused = is_processed(&mut tx, "refund:\0:7").await;
    assert!(
        matches!(refused, Err(ProcessedKeyError::KeyHoldsNul { at: 7 })),
        "{refused:?}"
    );
    let refused = mark_processed(&mut tx, "refund:7", Some(Duration::MAX)).await;
    assert!(
        matches!(refused, Err(ProcessedKeyError::ExpiryOutOfRange { .. })),
        "{refused:?}"
    );
    // The transaction was never aborted: the next key and the caller's row commit.
    assert!(mark_processed(&mut tx, "refund:7", None)
        .await
        .unwrap()
        .is_new());
    tx.commit().await.unwrap();
    assert_eq!(db.count("SELECT count(*) FROM refunds").await, 1);
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_processed_keys").await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_key_counts_as_new_and_retention_deletes_it() {
    let db = Db::new().await;
    let mut connection = db.pool.acquire().await.unwrap();
    let hour = Some(Duration::from_secs(3600));
    assert!(mark_processed(&mut connection, "kept", None)
        .await
        .unwrap()
        .is_new());
    assert!(mark_processed(&mut connection, "hour", hour)
        .await
        .unwrap()
        .is_new());
    assert!(
        mark_processed(&mut connection, "gone", Some(Duration::ZERO))
            .await
            .unwrap()
            .is_new()
    );
    assert!(jobs::postgres::is_processed(&mut connection, "hour")
        .await
        .unwrap());
    assert!(!jobs::postgres::is_processed(&mut connection, "gone")
        .await
        .unwrap());
    assert_eq!(
        mark_processed(&mut connection, "hour", hour).await.unwrap(),
        ProcessedKey::AlreadyProcessed
    );
    assert_eq!(
        mark_processed(&mut connection, "gone", Some(Duration::ZERO))
            .await
            .unwrap(),
        ProcessedKey::New,
        "an expired key is recorded again"
    );
    drop(connection);
    let retention = jobs::admin::Retention::new(db.pool.clone(), Default::default()).unwrap();
    let report = retention.run_once().await.unwrap();
    assert_eq!(report.processed_keys, 1);
    let left: Vec<String> = db
        .column("SELECT key FROM jobs_processed_keys ORDER BY key")
        .await;
    assert_eq!(left, ["hour", "kept"]);
}

#[tokio::test]
async fn a_context_without_a_worker_has_no_transaction() {
    let ctx = JobContext::for_test("record_receipt");
    assert!(matches!(
        ctx.transaction().await,
        Err(TransactionError::NoWorker)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processed_keys_are_found_by_digest_among_a_million() {
    let db = Db::new().await;
    db.execute(
        "INSERT INTO jobs_processed_keys (key, expires_at)
         SELECT 'refund:' || n, CASE WHEN n % 2 = 0 THEN now() - interval '1 hour' END
         FROM generate_series(1, 1000000) AS n",
    )
    .await;
    db.execute("ANALYZE jobs_processed_keys").await;
    let by_digest = |plan: &serde_json::Value| {
        let scans = scans_of(&plan_nodes(plan), "jobs_processed_keys");
        assert_no_seq_scan(&scans, "a processed key's statement");
        scans
    };
    let is_processed = explain_analyze(sql::IS_PROCESSED);
    let query = sqlx::query_scalar(&is_processed).bind("refund:7");
    let plan = plan_of(&db, "is_processed on 1,000,000 processed keys", query).await;
    assert_eq!(
        by_digest(&plan),
        [(
            "Index Scan".to_string(),
            "jobs_processed_keys_pkey".to_string()
        )]
    );
    let mark_processed = explain_analyze(sql::MARK_PROCESSED);
    let query = sqlx::query_scalar(&mark_processed)
        .bind("refund:8")
        .bind(60.0_f64);
    let plan = plan_of(&db, "mark_processed on 1,000,000 processed keys", query).await;
    by_digest(&plan);
    assert!(
        plan_nodes(&plan)
            .iter()
            .any(|node| node["Conflict Arbiter Indexes"][0] == "jobs_processed_keys_pkey"),
        "the insert's conflicts are found through the digest key"
    );
    // Retention: the oldest expired keys through the expiry index, then deleted by digest.
    let prune = explain_analyze(sql::PRUNE_PROCESSED_KEYS);
    let query = sqlx::query_scalar(&prune).bind(1000_i64).bind(1_i64);
    by_digest(&plan_of(&db, "retention of processed keys on 1,000,000 keys", query).await);
}
