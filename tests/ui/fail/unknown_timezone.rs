use jobs::{job, JobResult};

#[job(cron = "0 3 * * *", timezone = "Europe/Pariss")]
async fn nightly_report() -> JobResult {
    Ok(())
}

fn main() {}
