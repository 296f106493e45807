use jobs::{job, JobResult};

#[job]
async fn send_receipt(order_id: i64, email: &str) -> JobResult {
    let _ = (order_id, email);
    Ok(())
}

fn main() {}
