use std::rc::Rc;

use jobs::{job, JobResult};

async fn deliver(order_id: i64) {
    let _ = order_id;
}

#[job]
async fn send_receipt(order_id: i64) -> JobResult {
    let shared = Rc::new(order_id);
    deliver(*shared).await;
    drop(shared);
    Ok(())
}

fn main() {}
