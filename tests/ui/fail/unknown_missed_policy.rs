use jobs::{job, JobResult};

#[job(every = "10m", missed = "first")]
async fn refresh_rates() -> JobResult {
    Ok(())
}

fn main() {}
