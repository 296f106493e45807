use jobs::{job, JobResult};

#[job(cron = "0 3 * * *", every = "1d")]
async fn nightly_report() -> JobResult {
    Ok(())
}

fn main() {}
