use jobs::{job, JobResult};

#[job(dedupe = "receipt:<order_id>", dedupe_scope = "pending")]
async fn send_receipt(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

fn main() {}
