//! `jobs outbox list|replay`: parked outbox rows.

use std::time::Duration;

use jobs_postgres::admin::{self, HumanDuration, ParkedRow};
use jobs_postgres::PgPool;
use serde_json::{json, Value};

use super::{count, json_text, Report};
use crate::cli::{ChangeArgs, ConfirmArgs};
use crate::confirm;
use crate::error::CliError;
use crate::escape::shown;

/// Longest error message shown in a list.
const ERROR_WIDTH: usize = 80;

/// `outbox list`.
pub async fn list(
    pool: &PgPool,
    topic: Option<&str>,
    limit: usize,
    json: bool,
) -> Result<Report, CliError> {
    let rows = admin::list_parked(pool, topic, 0, limit).await?;
    if json {
        let rows: Vec<Value> = rows.iter().map(row_json).collect();
        return Ok(Report::success(json_text(&json!({ "parked": rows }))));
    }
    if rows.is_empty() {
        return Ok(Report::success("no parked outbox rows\n".to_owned()));
    }
    let mut table = crate::table::Table::new(&[
        ("ID", crate::table::Align::Right),
        ("TOPIC", crate::table::Align::Left),
        ("ATTEMPTS", crate::table::Align::Right),
        ("PARKED FOR", crate::table::Align::Right),
        ("LAST ERROR", crate::table::Align::Left),
    ]);
    for row in &rows {
        table.row(vec![
            row.id.to_string(),
            row.topic.clone(),
            row.attempts.to_string(),
            HumanDuration(Duration::from_secs(row.parked_for.as_secs())).to_string(),
            row.last_error
                .as_deref()
                .map_or_else(|| "-".to_owned(), shorten),
        ]);
    }
    let mut text = table.render();
    if rows.len() == limit {
        text.push_str(&format!(
            "showing the first {limit} parked rows: raise --limit or narrow with --topic\n"
        ));
    } else {
        text.push_str(&format!("{}\n", count(rows.len(), "parked outbox row")));
    }
    Ok(Report::success(text))
}

/// `outbox replay`: the rows of `ids`, or every parked row; with `--dry-run`, what it would
/// replay.
pub async fn replay(
    pool: &PgPool,
    ids: Option<&[i64]>,
    change: ChangeArgs,
    confirm: ConfirmArgs,
) -> Result<Report, CliError> {
    let replayed = if change.dry_run {
        admin::preview_replay_parked(pool, ids).await?
    } else {
        if ids.is_none() {
            let action = "replay every parked outbox row (--all)";
            if confirm::must_ask(action, confirm.yes)? {
                let parked = admin::preview_replay_parked(pool, None).await?.len();
                if parked > 0 {
                    confirm::ask(&format!(
                        "replay {}: every parked row",
                        count(parked, "parked outbox row")
                    ))?;
                }
            }
        }
        admin::replay_parked(pool, ids).await?
    };
    let not_parked: Vec<i64> = ids
        .unwrap_or_default()
        .iter()
        .copied()
        .filter(|id| !replayed.contains(id))
        .collect();
    if change.json {
        return Ok(Report::success(json_text(&json!({
            "dry_run": change.dry_run,
            "replayed": replayed,
            "not_parked": not_parked,
        }))));
    }
    let rows = count(replayed.len(), "parked outbox row");
    let mut text = match (replayed.is_empty(), change.dry_run) {
        (true, false) => "no parked outbox rows replayed\n".to_owned(),
        (true, true) => "no parked outbox rows to replay\n".to_owned(),
        (false, false) => format!(
            "replayed {rows}: a relay publishes {} next\n",
            if replayed.len() == 1 { "it" } else { "them" }
        ),
        (false, true) => {
            let ids: Vec<String> = replayed.iter().map(ToString::to_string).collect();
            format!("would replay {rows}: {}\n", ids.join(", "))
        }
    };
    for id in not_parked {
        text.push_str(&format!(
            "outbox row {id} is not parked: nothing to replay\n"
        ));
    }
    Ok(Report::success(text))
}

fn row_json(row: &ParkedRow) -> Value {
    json!({
        "id": row.id,
        "topic": row.topic,
        "payload": row.payload,
        "attempts": row.attempts,
        "last_error": row.last_error,
        "age_secs": row.age.as_secs_f64(),
        "parked_for_secs": row.parked_for.as_secs_f64(),
    })
}

/// One line, escaped, at most [`ERROR_WIDTH`] characters.
fn shorten(error: &str) -> String {
    let line = shown(error);
    if line.chars().count() <= ERROR_WIDTH {
        return line;
    }
    let mut short: String = line.chars().take(ERROR_WIDTH - 3).collect();
    short.push_str("...");
    short
}
