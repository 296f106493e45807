// A dependency must be a job (what an enqueue returned), not any integer: an order id passed
// where a job id is meant does not compile.
use jobs::{job, JobResult, PgConnection};

#[job]
async fn send_receipt(order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

async fn enqueue(conn: &mut PgConnection, order_id: i64) {
    let _ = send_receipt::builder(order_id)
        .after([order_id])
        .enqueue_in(conn)
        .await;
}

fn main() {}
