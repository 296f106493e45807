use jobs::{job, JobResult};

#[job(fair_key = "tenant")]
async fn export_report(tenant_id: i64) -> JobResult {
    let _ = tenant_id;
    Ok(())
}

fn main() {}
