use std::rc::Rc;

use jobs::{job, JobResult};

#[job]
async fn send_receipt(order_ids: Rc<Vec<i64>>) -> JobResult {
    let _ = order_ids;
    Ok(())
}

fn main() {}
