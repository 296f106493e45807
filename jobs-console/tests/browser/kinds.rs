//! The jobs the browser tests' workers run.

use jobs::{job, JobContext, JobError, JobResult, State};
use sqlx::PgPool;

/// Succeeds at once.
#[job(queue = "images")]
pub async fn resize(_ctx: JobContext, image_id: i64) -> JobResult {
    let _ = image_id;
    Ok(())
}

/// Succeeds at once.
#[job(queue = "emails", dedupe = "receipt:<order_id>")]
pub async fn send_receipt(_ctx: JobContext, order_id: i64) -> JobResult {
    let _ = order_id;
    Ok(())
}

/// Fails for good until its file is in the `uploadable` table (the "fix" a replay follows).
#[job(queue = "images", max_attempts = 1)]
pub async fn upload(_ctx: JobContext, pool: State<PgPool>, file: String) -> JobResult {
    let allowed: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM uploadable WHERE file = $1)")
            .bind(&file)
            .fetch_one(&*pool)
            .await?;
    if allowed {
        Ok(())
    } else {
        Err(JobError::permanent(format!(
            "{file}: the storage bucket refused the upload (403 Forbidden)"
        )))
    }
}

/// Runs every night; the schedules page shows it.
#[job(cron = "0 3 * * *", timezone = "Europe/Paris", queue = "reports")]
pub async fn nightly_report(_ctx: JobContext) -> JobResult {
    Ok(())
}
