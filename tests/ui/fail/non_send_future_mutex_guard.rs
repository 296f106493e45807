use std::sync::Mutex;

use jobs::{job, JobResult};

static SENT: Mutex<Vec<i64>> = Mutex::new(Vec::new());

async fn deliver(order_id: i64) {
    let _ = order_id;
}

#[job]
async fn send_receipt(order_id: i64) -> JobResult {
    let mut sent = SENT.lock().unwrap();
    deliver(order_id).await;
    sent.push(order_id);
    Ok(())
}

fn main() {}
