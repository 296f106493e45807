use jobs::{job, JobResult};

#[job(cron = "0 0 30 2 *")]
async fn leap_report() -> JobResult {
    Ok(())
}

fn main() {}
