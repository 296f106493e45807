use jobs::{job, JobKind, JobResult};

/// Claimed round-robin across tenants.
#[job(fair_key = "tenant:<tenant_id>", dedupe = "export:<tenant_id>:<report>")]
async fn export_report(tenant_id: i64, report: String) -> JobResult {
    let _ = (tenant_id, report);
    Ok(())
}

fn main() {
    assert_eq!(
        <export_report::Job as JobKind>::OPTIONS.fair_key,
        Some("tenant:<tenant_id>")
    );
    let job = jobs::NewJob::of::<export_report::Job>(&export_report::Args {
        tenant_id: 42,
        report: "sales".into(),
    })
    .unwrap();
    assert_eq!(job.fair_key.as_deref(), Some("tenant:42"));
}
