//! Typed job outputs: what a job returns is stored with the finished job and read back typed, by
//! operators and tests (`admin::output_of`) and by other jobs (`ctx.output_of`).

use std::collections::BTreeMap;

use jobs::admin::{self, OutputError};
use jobs::{job, Completion, JobContext, JobContextExt, JobResult, WorkerConfig, MAX_OUTPUT_BYTES};

use crate::support::{fast_config, start_worker, Db};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Receipt {
    pub order_id: i64,
    pub number: String,
    pub cents: i64,
}

fn receipt(order_id: i64) -> Receipt {
    Receipt {
        order_id,
        number: format!("R-{order_id}"),
        cents: 1250,
    }
}

/// Returns a receipt.
#[job]
async fn output_receipt(order_id: i64) -> JobResult<Receipt> {
    Ok(receipt(order_id))
}

/// Returns a number, through `Result<T, E>` with an error of its own.
#[job]
async fn output_count(items: i64) -> Result<i64, std::io::Error> {
    Ok(items * 3)
}

/// Returns nothing.
#[job]
async fn output_nothing(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

/// Returns a string of `bytes` bytes.
#[job]
async fn output_of_size(bytes: usize) -> JobResult<String> {
    Ok("x".repeat(bytes))
}

/// Returns a map that `serde_json` cannot write: its keys are not strings.
#[job]
async fn output_unserializable(order_id: i64) -> JobResult<BTreeMap<Vec<i64>, i64>> {
    Ok(BTreeMap::from([(vec![order_id], 1)]))
}

/// Completes itself in its own transaction with one receipt, then returns another: the
/// transaction's is the one kept.
#[job]
async fn output_in_transaction(ctx: JobContext, order_id: i64) -> JobResult<Receipt> {
    let tx = ctx.transaction().await?;
    tx.complete_with::<output_in_transaction::Job>(&receipt(order_id))
        .await?;
    Ok(receipt(order_id + 1000))
}

/// Completes itself in its own transaction with an output over the limit.
#[job]
async fn output_in_transaction_oversized(ctx: JobContext, bytes: usize) -> JobResult<String> {
    let tx = ctx.transaction().await?;
    tx.complete_with::<output_in_transaction_oversized::Job>(&"x".repeat(bytes))
        .await?;
    Ok(String::new())
}

/// Names another kind in `complete_with`.
#[job]
async fn output_in_transaction_other_kind(ctx: JobContext, order_id: i64) -> JobResult {
    let tx = ctx.transaction().await?;
    tx.complete_with::<output_receipt::Job>(&receipt(order_id))
        .await?;
    Ok(())
}

/// Reads the receipt of job `receipt_job` and returns its amount.
#[job]
async fn output_reader(ctx: JobContext, receipt_job: i64) -> JobResult<i64> {
    let receipt = ctx.output_of::<output_receipt::Job>(receipt_job).await?;
    Ok(receipt.cents)
}

const KINDS: &[&str] = &[
    "output_receipt",
    "output_count",
    "output_nothing",
    "output_of_size",
    "output_unserializable",
    "output_in_transaction",
    "output_in_transaction_oversized",
    "output_in_transaction_other_kind",
    "output_reader",
];

async fn round_trip(completion: Completion) {
    let db = Db::new().await;
    let receipt_id = output_receipt::enqueue(&db.pool, 7).await.unwrap().id();
    let count_id = output_count::enqueue(&db.pool, 5).await.unwrap().id();
    let nothing_id = output_nothing::enqueue(&db.pool, 1).await.unwrap().id();
    let worker = start_worker(
        &db.pool,
        KINDS,
        WorkerConfig {
            completion,
            ..fast_config()
        },
    );
    for id in [receipt_id, count_id, nothing_id] {
        db.wait_for_state(id, "done").await;
    }
    worker.shutdown().await.expect("the worker stops");

    let stored: Receipt = admin::output_of::<output_receipt::Job>(&db.pool, receipt_id)
        .await
        .unwrap();
    assert_eq!(stored, receipt(7));
    let count: i64 = admin::output_of::<output_count::Job>(&db.pool, count_id)
        .await
        .unwrap();
    assert_eq!(count, 15);
    admin::output_of::<output_nothing::Job>(&db.pool, nothing_id)
        .await
        .unwrap();
    assert!(
        db.job_value::<bool>(nothing_id, "output IS NULL").await,
        "a job returning () stores NULL"
    );
    let details = admin::job_details(&db.pool, receipt_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        details.output,
        Some(serde_json::json!({"order_id": 7, "number": "R-7", "cents": 1250}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_round_trips_typed_through_batched_outcomes() {
    round_trip(Completion::Batched { max_batch: 500 }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_round_trips_typed_through_per_job_outcomes() {
    round_trip(Completion::PerJob).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_with_stores_the_transactions_output_and_not_the_returned_one() {
    let db = Db::new().await;
    let id = output_in_transaction::enqueue(&db.pool, 3)
        .await
        .unwrap()
        .id();
    db.run_until(KINDS, id, "done").await;
    let stored = admin::output_of::<output_in_transaction::Job>(&db.pool, id)
        .await
        .unwrap();
    assert_eq!(
        stored,
        receipt(3),
        "the transaction's output, not the returned one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_reads_another_jobs_output_typed_through_its_context() {
    let db = Db::new().await;
    let receipt_id = output_receipt::enqueue(&db.pool, 9).await.unwrap().id();
    db.run_until(KINDS, receipt_id, "done").await;
    let reader = output_reader::enqueue(&db.pool, receipt_id)
        .await
        .unwrap()
        .id();
    db.run_until(KINDS, reader, "done").await;
    assert_eq!(
        admin::output_of::<output_reader::Job>(&db.pool, reader)
            .await
            .unwrap(),
        1250
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_over_the_limit_goes_dead_naming_its_size_and_the_limit() {
    let db = Db::new().await;
    // A JSON string is its bytes and two quotes.
    let fits = output_of_size::enqueue(&db.pool, MAX_OUTPUT_BYTES - 2)
        .await
        .unwrap()
        .id();
    let over = output_of_size::enqueue(&db.pool, MAX_OUTPUT_BYTES - 1)
        .await
        .unwrap()
        .id();
    let over_in_transaction = output_in_transaction_oversized::enqueue(&db.pool, MAX_OUTPUT_BYTES)
        .await
        .unwrap()
        .id();
    let [_, dead, dead_in_transaction] = db
        .run_until_each(
            KINDS,
            [
                (fits, "done"),
                (over, "dead"),
                (over_in_transaction, "dead"),
            ],
        )
        .await;
    let stored = admin::output_of::<output_of_size::Job>(&db.pool, fits)
        .await
        .unwrap();
    assert_eq!(stored.len(), MAX_OUTPUT_BYTES - 2);

    assert_eq!(dead.attempts, 1, "refused at once: permanent");
    let error = &dead.errors.0[0];
    assert_eq!(error.kind, "permanent");
    assert!(
        error.error.contains("262145 bytes") && error.error.contains("limit of 262144 bytes"),
        "{}",
        error.error
    );
    assert!(db.job_value::<bool>(over, "output IS NULL").await);

    assert_eq!(dead_in_transaction.attempts, 1);
    let error = &dead_in_transaction.errors.0[0];
    assert_eq!(error.kind, "permanent");
    assert!(
        error.error.contains("rolled back") && error.error.contains("262146 bytes"),
        "{}",
        error.error
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_that_does_not_serialize_goes_dead_with_the_serde_message() {
    let db = Db::new().await;
    let id = output_unserializable::enqueue(&db.pool, 1)
        .await
        .unwrap()
        .id();
    let other_kind = output_in_transaction_other_kind::enqueue(&db.pool, 1)
        .await
        .unwrap()
        .id();
    let [dead, other_kind_dead] = db
        .run_until_each(KINDS, [(id, "dead"), (other_kind, "dead")])
        .await;
    assert_eq!(dead.attempts, 1);
    let error = &dead.errors.0[0];
    assert_eq!(error.kind, "permanent");
    assert_eq!(
        error.error,
        "the job's output does not serialize to JSON: key must be a string"
    );
    assert_eq!(other_kind_dead.attempts, 1);
    assert!(
        other_kind_dead.errors.0[0]
            .error
            .contains("complete_with::<output_receipt> called in a job of kind `output_in_transaction_other_kind`"),
        "{}",
        other_kind_dead.errors.0[0].error
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_of_says_why_there_is_no_output() {
    let db = Db::new().await;
    let done = output_count::enqueue(&db.pool, 2).await.unwrap().id();
    db.run_until(KINDS, done, "done").await;
    let ready = output_count::enqueue(&db.pool, 2).await.unwrap().id();

    match admin::output_of::<output_count::Job>(&db.pool, done + 1000).await {
        Err(OutputError::NoSuchJob { id }) => assert_eq!(id, done + 1000),
        other => panic!("expected no such job, got {other:?}"),
    }
    match admin::output_of::<output_receipt::Job>(&db.pool, done).await {
        Err(error @ OutputError::OtherKind { .. }) => assert_eq!(
            error.to_string(),
            format!("job {done} is of kind `output_count`, not `output_receipt`: its output is not of the type asked for")
        ),
        other => panic!("expected another kind, got {other:?}"),
    }
    match admin::output_of::<output_count::Job>(&db.pool, ready).await {
        Err(OutputError::NotDone { id, state }) => {
            assert_eq!((id, state.as_str()), (ready, "ready"))
        }
        other => panic!("expected not done, got {other:?}"),
    }
    // The type changed since the job ran.
    db.execute(&format!(
        "UPDATE jobs_queue SET output = '\"fifteen\"' WHERE id = {done}"
    ))
    .await;
    match admin::output_of::<output_count::Job>(&db.pool, done).await {
        Err(OutputError::Undecodable { id, kind, message }) => {
            assert_eq!((id, kind), (done, "output_count"));
            assert!(
                message.contains("invalid type: string \"fifteen\", expected i64"),
                "{message}"
            );
        }
        other => panic!("expected undecodable, got {other:?}"),
    }
    match JobContext::for_test("output_reader")
        .output_of::<output_count::Job>(done)
        .await
    {
        Err(OutputError::NoWorker) => {}
        other => panic!("expected no worker, got {other:?}"),
    }
    let closed = db.other_pool(1).await;
    closed.close().await;
    match admin::output_of::<output_count::Job>(&closed, done).await {
        Err(OutputError::Database { id, .. }) => assert_eq!(id, done),
        other => panic!("expected a database error, got {other:?}"),
    }
}
