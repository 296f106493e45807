use jobs::{job, JobResult};

#[job(missed = "skip")]
async fn refresh_rates() -> JobResult {
    Ok(())
}

fn main() {}
