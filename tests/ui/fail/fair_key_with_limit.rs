use jobs::{job, JobResult};

#[job(fair_key = "<tenant_id>", rate_limit = "100/1s")]
async fn export_report(tenant_id: i64) -> JobResult {
    let _ = tenant_id;
    Ok(())
}

fn main() {}
