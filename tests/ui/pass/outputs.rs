//! A job may return a value: `JobResult<T>`, `Result<T, E>` (`std::io::Result<T>` too), with any
//! serializable `T`; other jobs and operators read it back as that type.

use jobs::{job, JobContext, JobContextExt, JobError, JobKind, JobResult, PgPool};

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Receipt {
    number: String,
    cents: i64,
}

#[derive(Debug)]
struct Declined;

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("declined")
    }
}

impl std::error::Error for Declined {}

#[job]
async fn charge_card(order_id: i64) -> JobResult<Receipt> {
    Ok(Receipt {
        number: format!("R-{order_id}"),
        cents: 1250,
    })
}

#[job]
async fn own_error(order_id: i64) -> Result<Vec<i64>, Declined> {
    if order_id < 0 {
        return Err(Declined);
    }
    Ok(vec![order_id])
}

#[job]
async fn io_result(path: String) -> std::io::Result<Option<String>> {
    Ok(Some(path))
}

#[job]
async fn job_error(order_id: i64) -> Result<(i64, bool), JobError> {
    Ok((order_id, true))
}

/// Reads the receipt typed, and completes in its own transaction with its own output.
#[job]
async fn send_receipt(ctx: JobContext, charge_job: i64) -> JobResult<String> {
    let receipt: Receipt = ctx.output_of::<charge_card::Job>(charge_job).await?;
    let tx = ctx.transaction().await?;
    tx.complete_with::<send_receipt::Job>(&receipt.number)
        .await?;
    Ok(receipt.number)
}

#[allow(dead_code)]
async fn operator(pool: &PgPool, charge_job: i64) -> Result<i64, jobs::admin::OutputError> {
    let receipt = jobs::admin::output_of::<charge_card::Job>(pool, charge_job).await?;
    Ok(receipt.cents)
}

fn output_type<K: JobKind>() -> &'static str {
    std::any::type_name::<K::Output>()
}

fn main() {
    assert!(output_type::<charge_card::Job>().ends_with("Receipt"));
    assert_eq!(output_type::<own_error::Job>(), "alloc::vec::Vec<i64>");
    let _ = (
        charge_card::builder(1),
        own_error::builder(1),
        io_result::builder(String::new()),
        job_error::builder(1),
        send_receipt::builder(1),
    );
}
