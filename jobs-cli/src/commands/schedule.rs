//! `jobs schedule remove`: forget a schedule the code no longer declares.

use jobs_postgres::admin;
use jobs_postgres::PgPool;

use super::Report;
use crate::error::CliError;

/// Removes schedule `name`; says so when there was none (safe to run twice).
pub async fn remove(pool: &PgPool, name: &str) -> Result<Report, CliError> {
    Ok(Report::success(
        if admin::remove_schedule(pool, name).await? {
            format!("removed schedule {name}; its jobs stay\n")
        } else {
            format!("no schedule named {name}: nothing removed\n")
        },
    ))
}
