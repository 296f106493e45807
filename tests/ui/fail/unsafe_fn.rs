use jobs::{job, JobResult};

#[job]
async unsafe fn send_receipt(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

fn main() {}
