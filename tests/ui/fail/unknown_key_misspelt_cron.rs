use jobs::{job, JobResult};

#[job(cronn = "0 3 * * *")]
async fn nightly_report() -> JobResult {
    Ok(())
}

fn main() {}
