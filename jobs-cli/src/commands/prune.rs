//! `jobs prune`: retention, now, until nothing older is left.

use std::time::Duration;

use jobs_postgres::admin::{HumanDuration, Retention, RetentionConfig, RetentionReport};
use jobs_postgres::PgPool;

use serde_json::json;

use super::{count, json_text, Report};
use crate::cli::ChangeArgs;
use crate::error::CliError;
use crate::progress::Progress;

/// Deletes done and cancelled jobs finished more than `older_than` ago, expired processed keys
/// and outbox rows published more than `older_than` ago, `batch_size` per statement. With
/// `--dry-run`, counts them and deletes nothing.
pub async fn run(
    pool: &PgPool,
    older_than: Duration,
    batch_size: u32,
    change: ChangeArgs,
) -> Result<Report, CliError> {
    let config = RetentionConfig {
        max_age: older_than,
        batch_size: usize::try_from(batch_size).unwrap_or(usize::MAX),
        ..RetentionConfig::default()
    };
    let retention = Retention::new(pool.clone(), config)?;
    let age = HumanDuration(older_than);
    if change.dry_run {
        let report = retention.preview().await?;
        return Ok(Report::success(if change.json {
            report_json(older_than, true, &report)
        } else {
            preview_text(age, &report)
        }));
    }
    let progress = Progress::spinner("deleting finished jobs");
    let (mut done, mut cancelled, mut keys, mut outbox) = (0, 0, 0, 0);
    let mut locked_elsewhere = false;
    loop {
        let report = retention.run_once().await?;
        done += report.done;
        cancelled += report.cancelled;
        keys += report.processed_keys;
        outbox += report.outbox;
        progress.advance(report.deleted());
        if report.locked_elsewhere {
            locked_elsewhere = true;
            break;
        }
        if !report.more {
            break;
        }
    }
    drop(progress);
    if change.json {
        let report = RetentionReport {
            locked_elsewhere,
            done,
            cancelled,
            processed_keys: keys,
            outbox,
            more: false,
            ..RetentionReport::default()
        };
        return Ok(Report::success(report_json(older_than, false, &report)));
    }
    let deleted = done + cancelled;
    let mut text = if deleted == 0 {
        format!("nothing deleted: no done or cancelled job finished more than {age} ago\n")
    } else {
        format!(
            "deleted {} finished more than {age} ago ({done} done, {cancelled} cancelled)\n",
            count(usize::try_from(deleted).unwrap_or(usize::MAX), "job"),
        )
    };
    if keys > 0 {
        text.push_str(&format!(
            "deleted {}\n",
            count(
                usize::try_from(keys).unwrap_or(usize::MAX),
                "expired processed key"
            )
        ));
    }
    if outbox > 0 {
        text.push_str(&format!(
            "deleted {} published more than {age} ago\n",
            count(usize::try_from(outbox).unwrap_or(usize::MAX), "outbox row")
        ));
    }
    if locked_elsewhere {
        text = if deleted == 0 {
            "another process is deleting finished jobs right now; nothing deleted here\n".to_owned()
        } else {
            format!("{text}another process is deleting the rest\n")
        };
    }
    Ok(Report::success(text))
}

/// What a prune would delete, as text.
fn preview_text(age: HumanDuration, report: &RetentionReport) -> String {
    let jobs = usize::try_from(report.deleted()).unwrap_or(usize::MAX);
    let mut text = if jobs == 0 {
        format!("nothing to delete: no done or cancelled job finished more than {age} ago\n")
    } else {
        format!(
            "would delete {} finished more than {age} ago ({} done, {} cancelled)\n",
            count(jobs, "job"),
            report.done,
            report.cancelled
        )
    };
    if report.processed_keys > 0 {
        text.push_str(&format!(
            "would delete {}\n",
            count(
                usize::try_from(report.processed_keys).unwrap_or(usize::MAX),
                "expired processed key"
            )
        ));
    }
    if report.outbox > 0 {
        text.push_str(&format!(
            "would delete {} published more than {age} ago\n",
            count(
                usize::try_from(report.outbox).unwrap_or(usize::MAX),
                "outbox row"
            )
        ));
    }
    text
}

/// What a prune deleted, or would delete, as JSON.
fn report_json(older_than: Duration, dry_run: bool, report: &RetentionReport) -> String {
    json_text(&json!({
        "dry_run": dry_run,
        "older_than_secs": older_than.as_secs_f64(),
        "done": report.done,
        "cancelled": report.cancelled,
        "processed_keys": report.processed_keys,
        "outbox": report.outbox,
        "locked_elsewhere": report.locked_elsewhere,
    }))
}
