use jobs::{job, JobContext, JobContextExt, JobResult};

#[job]
async fn count_items(order_id: i64) -> JobResult<i64> {
    Ok(order_id * 3)
}

#[job]
async fn report(ctx: JobContext, count_job: i64) -> JobResult {
    let count: String = ctx.output_of::<count_items::Job>(count_job).await?;
    let _ = count;
    Ok(())
}

fn main() {}
