//! `jobs schedule remove`: forget a schedule the code no longer declares.

use jobs_postgres::admin;
use jobs_postgres::PgPool;
use serde_json::json;

use super::{json_text, Report};
use crate::cli::ChangeArgs;
use crate::error::CliError;
use crate::escape::shown;

/// Removes schedule `name`; says so when there was none (safe to run twice). With `--dry-run`,
/// says whether there is one to remove.
pub async fn remove(pool: &PgPool, name: &str, change: ChangeArgs) -> Result<Report, CliError> {
    let removed = if change.dry_run {
        admin::stats(pool)
            .await?
            .schedules
            .iter()
            .any(|schedule| schedule.name == name)
    } else {
        admin::remove_schedule(pool, name).await?
    };
    if change.json {
        return Ok(Report::success(json_text(&json!({
            "dry_run": change.dry_run,
            "name": name,
            "removed": removed,
        }))));
    }
    let name = shown(name);
    Ok(Report::success(match (removed, change.dry_run) {
        (true, false) => format!("removed schedule {name}; its jobs stay\n"),
        (true, true) => format!("would remove schedule {name}; its jobs would stay\n"),
        (false, _) => format!(
            "no schedule named {name}: nothing {}\n",
            if change.dry_run {
                "to remove"
            } else {
                "removed"
            }
        ),
    }))
}
