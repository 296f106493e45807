use jobs::{job, JobResult};

#[job(queue = "email", max_attempts = 3, queue = "mail")]
async fn send_receipt(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

fn main() {}
