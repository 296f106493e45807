use jobs::{job, DedupeScope, JobKind, JobResult};

#[job(
    name = "billing.send_receipt",
    queue = "email",
    max_attempts = 12,
    priority = -5,
    timeout = "2m",
    lease = "5m",
    heartbeat = "1m",
    backoff_base = "10s",
    backoff_max = "1h30m",
    jitter = 0.25,
    dedupe = "receipt:<order_id>",
    dedupe_scope = "active",
    crate = "jobs"
)]
async fn send_receipt(order_id: i64, email: String) -> JobResult {
    let _ = (order_id, email);
    Ok(())
}

fn main() {
    let options = <send_receipt::Job as JobKind>::OPTIONS;
    assert_eq!(<send_receipt::Job as JobKind>::NAME, "billing.send_receipt");
    assert_eq!(options.queue, "email");
    assert_eq!(options.priority, -5);
    assert_eq!(options.retry.max_attempts, 12);
    assert_eq!(options.retry.backoff_base.as_secs(), 10);
    assert_eq!(options.retry.backoff_max.as_secs(), 5400);
    assert_eq!(options.retry.jitter, 0.25);
    assert_eq!(options.timeout.map(|timeout| timeout.as_secs()), Some(120));
    assert_eq!(options.lease.map(|lease| lease.as_secs()), Some(300));
    assert_eq!(options.heartbeat.map(|heartbeat| heartbeat.as_secs()), Some(60));
    assert_eq!(options.dedupe, Some("receipt:<order_id>"));
    assert_eq!(options.dedupe_scope, DedupeScope::Active);
    let _ = send_receipt::Args {
        order_id: 1042,
        email: String::from("ada@example.com"),
    };
}
