//! `jobs schedule remove`: forget a schedule the code no longer declares.

use chrono::SecondsFormat;
use jobs_postgres::admin::{self, Removal, ScheduleRemoval};
use jobs_postgres::PgPool;

use super::Report;
use crate::error::CliError;

/// Removes schedule `name`; says so when there was none (safe to run twice). A schedule still
/// kept up with is refused unless `force`.
pub async fn remove(pool: &PgPool, name: &str, force: bool) -> Result<Report, CliError> {
    let removal = if force {
        Removal::Force
    } else {
        Removal::IfInactive
    };
    match admin::remove_schedule(pool, name, removal).await? {
        ScheduleRemoval::Removed => Ok(Report::success(format!(
            "removed schedule {name}; its jobs stay\n"
        ))),
        ScheduleRemoval::NotFound => Ok(Report::success(format!(
            "no schedule named {name}: nothing removed\n"
        ))),
        ScheduleRemoval::Active {
            last_tick,
            next_tick,
        } => Err(CliError::ScheduleActive {
            name: name.to_string(),
            last_tick: last_tick.to_rfc3339_opts(SecondsFormat::Secs, true),
            next: next_tick.map_or_else(String::new, |next| {
                format!(
                    ", next due at {}",
                    next.to_rfc3339_opts(SecondsFormat::Secs, true)
                )
            }),
        }),
    }
}
