use std::cell::Cell;

use jobs::{job, JobResult, State};

struct Counter {
    sent: Cell<u32>,
}

#[job]
async fn send_receipt(counter: State<Counter>, order_id: i64) -> JobResult {
    counter.sent.set(counter.sent.get() + 1);
    let _ = order_id;
    Ok(())
}

fn main() {}
