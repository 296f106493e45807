use std::time::Duration;

use jobs::{job, JobKind, JobResult, RateLimit};

#[job(rate_limit = "100/1s", queue = "webhooks")]
async fn deliver_webhook(endpoint_id: i64) -> JobResult {
    let _ = endpoint_id;
    Ok(())
}

#[job(rate_limit = "10/m", max_running = 2)]
async fn call_provider(request_id: i64) -> JobResult {
    let _ = request_id;
    Ok(())
}

fn main() {
    let options = <deliver_webhook::Job as JobKind>::OPTIONS;
    assert_eq!(
        options.rate_limit,
        Some(RateLimit::new(100, Duration::from_secs(1)).unwrap())
    );
    assert_eq!(options.max_running, None);
    let options = <call_provider::Job as JobKind>::OPTIONS;
    assert_eq!(options.rate_limit.map(|limit| limit.to_string()).as_deref(), Some("10/1m"));
    assert_eq!(options.max_running, Some(2));
}
