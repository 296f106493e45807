use jobs::{job, JobKind, JobResult};

#[job(max_running = 2, queue = "exports")]
async fn export_report(report_id: i64, format: String) -> JobResult {
    let _ = (report_id, format);
    Ok(())
}

#[job(max_running = 1, every = "5m")]
async fn rebuild_search_index() -> JobResult {
    Ok(())
}

fn main() {
    let options = <export_report::Job as JobKind>::OPTIONS;
    assert_eq!(options.max_running, Some(2));
    assert_eq!(options.schedule, None);
    let _ = export_report::builder(7, String::from("csv"));
    let options = <rebuild_search_index::Job as JobKind>::OPTIONS;
    assert_eq!(options.max_running, Some(1));
    assert!(options.schedule.is_some());
}
