use jobs::{job, JobResult};

#[job(max_running_per_key = 2)]
async fn charge(merchant_id: i64, amount_cents: i64) -> JobResult {
    let _ = (merchant_id, amount_cents);
    Ok(())
}

fn main() {}
