use jobs::{job, JobResult};

#[job]
async fn send_receipt(order: impl serde::Serialize + Send) -> JobResult {
    let _ = order;
    Ok(())
}

fn main() {}
