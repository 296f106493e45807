use jobs::{job, JobResult};

#[job(dedupe = "receipt:<order>")]
async fn send_receipt(order_id: i64, email: String) -> JobResult {
    let _ = (order_id, email);
    Ok(())
}

fn main() {}
