//! `jobs schedule remove`: forget a schedule the code no longer declares; `jobs schedule
//! trigger`: one run now.

use chrono::SecondsFormat;
use jobs_postgres::admin::{self, Removal, ScheduleRemoval, Trigger};
use jobs_postgres::PgPool;
use serde_json::json;

use super::{json_text, Report};
use crate::cli::ChangeArgs;
use crate::error::CliError;
use crate::escape::shown;

/// Removes schedule `name`; says so when there was none (safe to run twice). A schedule still
/// kept up with is refused unless `force`. With `--dry-run`, says what removing would do.
pub async fn remove(
    pool: &PgPool,
    name: &str,
    force: bool,
    change: ChangeArgs,
) -> Result<Report, CliError> {
    let removal = if force {
        Removal::Force
    } else {
        Removal::IfInactive
    };
    let outcome = if change.dry_run {
        admin::preview_schedule_removal(pool, name, removal).await?
    } else {
        admin::remove_schedule(pool, name, removal).await?
    };
    let removed = outcome == ScheduleRemoval::Removed;
    if let ScheduleRemoval::Active {
        last_tick,
        next_tick,
    } = outcome
    {
        return Err(CliError::ScheduleActive {
            name: shown(name).to_string(),
            last_tick: last_tick.to_rfc3339_opts(SecondsFormat::Secs, true),
            next: next_tick.map_or_else(String::new, |next| {
                format!(
                    ", next due at {}",
                    next.to_rfc3339_opts(SecondsFormat::Secs, true)
                )
            }),
        });
    }
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

/// Enqueues one run of schedule `name` now. A schedule that does not exist, or whose job
/// settings no worker of this version has recorded yet, is an error.
pub async fn trigger(pool: &PgPool, name: &str, json: bool) -> Result<Report, CliError> {
    let id = match admin::trigger_schedule(pool, name).await? {
        Trigger::Enqueued { id } => id,
        Trigger::NotFound => {
            return Err(CliError::ScheduleNotFound {
                name: shown(name).to_string(),
            })
        }
        Trigger::SettingsUnknown => {
            return Err(CliError::ScheduleSettingsUnknown {
                name: shown(name).to_string(),
            })
        }
    };
    if json {
        return Ok(Report::success(json_text(
            &json!({ "name": name, "id": id }),
        )));
    }
    Ok(Report::success(format!(
        "enqueued job {id}, a run of schedule {} due now; its ticks are untouched\n",
        shown(name)
    )))
}
