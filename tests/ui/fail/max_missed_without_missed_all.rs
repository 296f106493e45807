use jobs::{job, JobResult};

#[job(every = "10m", missed = "latest", max_missed = 5)]
async fn refresh_rates() -> JobResult {
    Ok(())
}

fn main() {}
