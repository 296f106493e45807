//! `jobs outbox list|replay`: parked outbox rows.

use std::time::Duration;

use jobs_postgres::admin::{self, HumanDuration, ParkedRow};
use jobs_postgres::PgPool;
use serde_json::{json, Value};

use super::{count, json_text, Report};
use crate::error::CliError;

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

/// `outbox replay`: the rows of `ids`, or every parked row.
pub async fn replay(pool: &PgPool, ids: Option<&[i64]>) -> Result<Report, CliError> {
    let replayed = admin::replay_parked(pool, ids).await?;
    let mut text = if replayed.is_empty() {
        "no parked outbox rows replayed\n".to_owned()
    } else {
        format!(
            "replayed {}: a relay publishes {} next\n",
            count(replayed.len(), "parked outbox row"),
            if replayed.len() == 1 { "it" } else { "them" }
        )
    };
    for id in ids.unwrap_or_default() {
        if !replayed.contains(id) {
            text.push_str(&format!(
                "outbox row {id} is not parked: nothing to replay\n"
            ));
        }
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

/// One line, at most [`ERROR_WIDTH`] characters.
fn shorten(error: &str) -> String {
    let line = error.replace('\n', " ");
    if line.chars().count() <= ERROR_WIDTH {
        return line;
    }
    let mut short: String = line.chars().take(ERROR_WIDTH - 3).collect();
    short.push_str("...");
    short
}
