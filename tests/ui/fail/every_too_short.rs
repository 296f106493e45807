use jobs::{job, JobResult};

#[job(every = "500ms")]
async fn poll_inbox() -> JobResult {
    Ok(())
}

fn main() {}
