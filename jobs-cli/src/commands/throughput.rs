//! `jobs throughput`: the runs ended per minute, queue and kind over the last minutes.

use std::time::Duration;

use jobs_postgres::admin::{self, ThroughputPoint};
use jobs_postgres::PgPool;
use serde_json::{json, Value};

use super::{json_text, Report};
use crate::error::CliError;
use crate::table::{Align, Table};

/// Shows the runs ended in each of the last `minutes` minutes, as a table or JSON.
pub async fn run(pool: &PgPool, minutes: u32, json: bool) -> Result<Report, CliError> {
    let window = Duration::from_secs(u64::from(minutes) * 60);
    let points = admin::throughput(pool, window).await?;
    if json {
        let points: Vec<Value> = points.iter().map(point_json).collect();
        return Ok(Report::success(json_text(&json!({
            "minutes": minutes,
            "points": points,
        }))));
    }
    if points.is_empty() {
        return Ok(Report::success(format!(
            "no runs ended in the last {minutes} minute{}\n",
            if minutes == 1 { "" } else { "s" }
        )));
    }
    let mut table = Table::new(&[
        ("MINUTE (UTC)", Align::Left),
        ("QUEUE", Align::Left),
        ("KIND", Align::Left),
        ("DONE", Align::Right),
        ("RETRIED", Align::Right),
        ("DEAD", Align::Right),
        ("CANCELLED", Align::Right),
    ]);
    let mut total = [0_u64; 4];
    for point in &points {
        for (sum, count) in
            total
                .iter_mut()
                .zip([point.done, point.retried, point.dead, point.cancelled])
        {
            *sum += count;
        }
        table.row(vec![
            point.minute.format("%Y-%m-%d %H:%M").to_string(),
            point.queue.clone(),
            point.kind.clone(),
            point.done.to_string(),
            point.retried.to_string(),
            point.dead.to_string(),
            point.cancelled.to_string(),
        ]);
    }
    let [done, retried, dead, cancelled] = total;
    table.row(vec![
        format!("last {minutes}m"),
        "total".to_owned(),
        String::new(),
        done.to_string(),
        retried.to_string(),
        dead.to_string(),
        cancelled.to_string(),
    ]);
    Ok(Report::success(table.render()))
}

fn point_json(point: &ThroughputPoint) -> Value {
    json!({
        "minute": point.minute.to_rfc3339(),
        "queue": point.queue,
        "kind": point.kind,
        "done": point.done,
        "retried": point.retried,
        "dead": point.dead,
        "cancelled": point.cancelled,
    })
}
