use jobs::{job, JobKind, JobResult};

#[job(name = "billing.send_receipt:v2/eu-west_1", queue = "billing-mail.eu/west:1", max_attempts = 2147483647)]
async fn send_receipt(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

fn main() {
    assert_eq!(send_receipt::Job::NAME, "billing.send_receipt:v2/eu-west_1");
    assert_eq!(send_receipt::Job::OPTIONS.queue, "billing-mail.eu/west:1");
    assert_eq!(send_receipt::Job::OPTIONS.retry.max_attempts, 2147483647);
}
