//! `jobs workers`: the live worker processes, with their queues, kinds and the limits they
//! enforce.

use jobs_postgres::admin::{self, HumanDuration, LiveWorker};
use jobs_postgres::PgPool;
use serde_json::{json, Value};

use super::{count, json_text, Report};
use crate::error::CliError;
use crate::table::{Align, Table};

/// Lists the live workers as a table or JSON.
pub async fn run(pool: &PgPool, json: bool) -> Result<Report, CliError> {
    let workers = admin::live_workers(pool).await?;
    if json {
        let workers: Vec<Value> = workers.iter().map(worker_json).collect();
        return Ok(Report::success(json_text(&json!({ "workers": workers }))));
    }
    if workers.is_empty() {
        return Ok(Report::success(
            "no live workers: no worker process has said it is running in the last few seconds\n"
                .to_owned(),
        ));
    }
    let mut table = Table::new(&[
        ("HOST", Align::Left),
        ("PID", Align::Right),
        ("VERSION", Align::Left),
        ("STARTED", Align::Left),
        ("LAST SEEN", Align::Left),
        ("QUEUES", Align::Left),
        ("KINDS", Align::Left),
    ]);
    for worker in &workers {
        let started = (worker.last_seen_at - worker.started_at)
            .to_std()
            .unwrap_or_default()
            + worker.last_seen_ago;
        table.row(vec![
            worker.host.clone(),
            worker.pid.to_string(),
            worker.version.clone(),
            format!("{} ago", HumanDuration(seconds(started))),
            format!("{} ago", HumanDuration(seconds(worker.last_seen_ago))),
            worker
                .queues
                .iter()
                .map(|queue| format!("{} ({})", queue.queue, queue.concurrency))
                .collect::<Vec<_>>()
                .join(", "),
            worker.kinds.join(", "),
        ]);
    }
    let mut text = table.render();
    text.push_str(&format!(
        "{} live; QUEUES: each with how many of its jobs the worker runs at once\n",
        count(workers.len(), "worker")
    ));
    for worker in &workers {
        for limits in &worker.limits {
            text.push_str(&format!(
                "limit: worker {}/{}: kind {}: {limits}\n",
                worker.host, worker.pid, limits.kind
            ));
        }
    }
    Ok(Report::success(text))
}

/// To the second: sub-second parts of an age are noise in a table.
fn seconds(age: std::time::Duration) -> std::time::Duration {
    std::time::Duration::from_secs(age.as_secs())
}

fn worker_json(worker: &LiveWorker) -> Value {
    json!({
        "id": worker.id.to_string(),
        "host": worker.host,
        "pid": worker.pid,
        "version": worker.version,
        "queues": worker.queues.iter().map(|queue| json!({
            "queue": queue.queue,
            "concurrency": queue.concurrency,
        })).collect::<Vec<_>>(),
        "kinds": worker.kinds,
        "limits": worker.limits.iter().map(|limits| json!({
            "kind": limits.kind,
            "max_running": limits.max_running,
            "rate_limit": limits.rate_limit.map(|rate| rate.to_string()),
            "max_running_per_key": limits.max_running_per_key,
            "rate_limit_per_key": limits.rate_limit_per_key.map(|rate| rate.to_string()),
        })).collect::<Vec<_>>(),
        "started_at": worker.started_at.to_rfc3339(),
        "last_seen_at": worker.last_seen_at.to_rfc3339(),
        "last_seen_secs": worker.last_seen_ago.as_secs_f64(),
    })
}
