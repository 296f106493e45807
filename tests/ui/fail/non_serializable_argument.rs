use jobs::{job, JobResult};

struct Order {
    id: i64,
}

#[job]
async fn send_receipt(order: Order, attempt_note: String) -> JobResult {
    let _ = (order.id, attempt_note);
    Ok(())
}

fn main() {}
