use jobs::{job, JobResult};

#[job(rate_limit_per_key = "10/1s")]
async fn charge(merchant_id: i64, amount_cents: i64) -> JobResult {
    let _ = (merchant_id, amount_cents);
    Ok(())
}

fn main() {}
