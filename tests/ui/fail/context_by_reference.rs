use jobs::{job, JobContext, JobResult};

#[job]
async fn send_receipt(ctx: &JobContext, order_id: i64) -> JobResult {
    let _ = (ctx, order_id);
    Ok(())
}

fn main() {}
