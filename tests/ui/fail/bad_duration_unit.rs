use jobs::{job, JobResult};

#[job(timeout = "5 minutes")]
async fn send_receipt(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

fn main() {}
