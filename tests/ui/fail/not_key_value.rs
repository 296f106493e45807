use jobs::{job, JobResult};

#[job(unique)]
async fn send_receipt(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

#[job(retry(max = 3))]
async fn send_invoice(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

fn main() {}
