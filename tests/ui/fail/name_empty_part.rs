use jobs::{job, JobResult};

#[job(queue = "orders..eu")]
async fn send_receipt(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

#[job(name = "billing.")]
async fn ship_order(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

fn main() {}
