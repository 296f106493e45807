use jobs::{job, JobContext, JobResult};

#[job(cron = "0 3 * * *")]
async fn nightly_report(ctx: JobContext, account_id: i64, day: String) -> JobResult {
    let _ = (ctx, account_id, day);
    Ok(())
}

fn main() {}
