use jobs::{job, JobResult};

#[job(rate_limit = "0/1s")]
async fn call_provider(request_id: i64) -> JobResult {
    let _ = request_id;
    Ok(())
}

fn main() {}
