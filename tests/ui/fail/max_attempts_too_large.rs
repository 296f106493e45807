use jobs::{job, JobResult};

#[job(max_attempts = 3000000000)]
async fn send_receipt(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

fn main() {}
