use jobs::{job, JobResult};

#[job(every = "10m", missed = "all", max_missed = 0)]
async fn refresh_rates() -> JobResult {
    Ok(())
}

fn main() {}
