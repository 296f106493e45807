use jobs::{job, JobResult};

#[job(limit_key = "<merchant_id>")]
async fn charge(merchant_id: i64, amount_cents: i64) -> JobResult {
    let _ = (merchant_id, amount_cents);
    Ok(())
}

fn main() {}
