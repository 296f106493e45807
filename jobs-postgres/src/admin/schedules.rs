//! Schedules an operator removes: see [`remove_schedule`].

use sqlx::PgPool;

use super::AdminError;
use crate::sql;

/// Removes the schedule `name` from `jobs_schedules`, so that it is no longer reported (a
/// schedule removed from the code stays there until then); returns whether it existed. Its jobs
/// stay. A worker that still declares it registers it again when it starts.
pub async fn remove_schedule(pool: &PgPool, name: &str) -> Result<bool, AdminError> {
    let removed: Option<String> = sqlx::query_scalar(sql::REMOVE_SCHEDULE)
        .bind(name)
        .fetch_optional(pool)
        .await?;
    Ok(removed.is_some())
}
