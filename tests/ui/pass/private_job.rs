//! A private job's generated items are visible where the function is.

use jobs::{job, JobKind, JobResult};

#[job]
async fn send_receipt(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

mod inner {
    use jobs::{job, JobResult};

    #[job]
    async fn cleanup(older_than_days: u32) -> JobResult {
        let _ = older_than_days;
        Ok(())
    }

    pub fn cleanup_name() -> &'static str {
        <cleanup::Job as jobs::JobKind>::NAME
    }
}

fn main() {
    let _ = send_receipt::builder(7);
    let _ = send_receipt::Args { order_id: 7 };
    assert_eq!(<send_receipt::Job as JobKind>::NAME, "send_receipt");
    assert_eq!(inner::cleanup_name(), "cleanup");
}
