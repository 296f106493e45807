use jobs::{job, JobResult};

#[job(timeout = 30)]
async fn send_receipt(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

fn main() {}
