use jobs::{job, JobResult};

#[job(max_running = 0)]
async fn export_report(report_id: i64) -> JobResult {
    let _ = report_id;
    Ok(())
}

fn main() {}
