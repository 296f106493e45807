use jobs::{job, JobResult};

#[job(limit_key = "<merchant_id>", rate_limit_per_key = "10/1 fortnight")]
async fn charge(merchant_id: i64, amount_cents: i64) -> JobResult {
    let _ = (merchant_id, amount_cents);
    Ok(())
}

fn main() {}
