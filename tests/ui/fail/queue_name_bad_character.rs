use jobs::{job, JobResult};

#[job(queue = "mail queue")]
async fn send_receipt(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

#[job(queue = "orders.*")]
async fn ship_order(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

fn main() {}
