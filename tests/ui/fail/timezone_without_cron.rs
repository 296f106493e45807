use jobs::{job, JobResult};

#[job(every = "1h", timezone = "Europe/Paris")]
async fn hourly_report() -> JobResult {
    Ok(())
}

fn main() {}
