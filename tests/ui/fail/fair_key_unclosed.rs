use jobs::{job, JobResult};

#[job(fair_key = "tenant:<tenant_id")]
async fn export_report(tenant_id: i64) -> JobResult {
    let _ = tenant_id;
    Ok(())
}

fn main() {}
