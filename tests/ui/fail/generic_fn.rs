use jobs::{job, JobResult};

#[job]
async fn send_receipt<T: serde::Serialize>(order: T) -> JobResult {
    let _ = order;
    Ok(())
}

fn main() {}
