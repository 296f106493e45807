use jobs::{job, JobResult};

#[job(cron = "61 3 * * *")]
async fn nightly_report() -> JobResult {
    Ok(())
}

fn main() {}
