use jobs::{job, JobResult};

struct Mailer;

impl Mailer {
    #[job]
    async fn send_receipt(order_id: i64) -> JobResult {
        let _ = order_id;
        Ok(())
    }
}

fn main() {}
