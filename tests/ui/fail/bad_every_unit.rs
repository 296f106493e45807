use jobs::{job, JobResult};

#[job(every = "10 seconds")]
async fn poll_inbox() -> JobResult {
    Ok(())
}

fn main() {}
