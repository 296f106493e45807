use jobs::{job, JobResult};

#[job(name = "billing\nsend_receipt")]
async fn send_receipt(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

fn main() {}
