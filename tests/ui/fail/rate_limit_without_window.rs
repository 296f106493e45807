use jobs::{job, JobResult};

#[job(rate_limit = "100")]
async fn call_provider(request_id: i64) -> JobResult {
    let _ = request_id;
    Ok(())
}

fn main() {}
