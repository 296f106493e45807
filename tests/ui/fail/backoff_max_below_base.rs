use jobs::{job, JobResult};

#[job(backoff_base = "1m", backoff_max = "30s")]
async fn send_receipt(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

fn main() {}
