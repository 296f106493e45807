//! `jobs job workflow`: the jobs connected to one through dependencies, and its batch.

use jobs_core::JobId;
use jobs_postgres::admin::{self, Workflow};
use jobs_postgres::BatchOutcome;
use jobs_postgres::PgPool;
use serde_json::{json, Value};

use super::{json_text, Report};
use crate::error::CliError;
use crate::escape::shown;
use crate::table::{Align, Table};

/// Reads the workflow of job `id` (at most `limit` jobs) and renders it.
pub async fn show(pool: &PgPool, id: JobId, limit: usize, json: bool) -> Result<Report, CliError> {
    let workflow = admin::workflow(pool, id, limit)
        .await?
        .ok_or(CliError::NoSuchJob(id))?;
    Ok(Report::success(if json {
        json_text(&to_json(&workflow))
    } else {
        to_text(&workflow)
    }))
}

fn to_text(workflow: &Workflow) -> String {
    let mut table = Table::new(&[
        ("ID", Align::Right),
        ("KIND", Align::Left),
        ("QUEUE", Align::Left),
        ("STATE", Align::Left),
        ("RUNS AFTER", Align::Left),
    ]);
    for job in &workflow.jobs {
        let marker = if job.id == workflow.job { "*" } else { "" };
        let after: Vec<String> = job.prerequisites.iter().map(ToString::to_string).collect();
        table.row(vec![
            format!("{marker}{}", job.id),
            job.kind.as_deref().map_or_else(|| "-".to_owned(), shown),
            job.queue.as_deref().map_or_else(|| "-".to_owned(), shown),
            job.state
                .map_or_else(|| "gone".to_owned(), |state| state.to_string()),
            if after.is_empty() {
                "-".to_owned()
            } else {
                after.join(", ")
            },
        ]);
    }
    let mut text = table.render();
    text.push_str(&format!(
        "* job {}; {} job{} connected through dependencies{}\n",
        workflow.job,
        workflow.jobs.len(),
        if workflow.jobs.len() == 1 { "" } else { "s" },
        if workflow.truncated {
            ", and more not listed (raise --limit)"
        } else {
            ""
        }
    ));
    if let Some(batch) = &workflow.batch {
        text.push_str(&batch_line(batch));
    }
    text
}

/// One line on a batch: its counts, its end, its callback.
fn batch_line(batch: &BatchOutcome) -> String {
    let ended = if batch.ended_at.is_some() {
        "ended"
    } else {
        "open"
    };
    let callback = batch
        .callback
        .map_or_else(String::new, |callback| format!(", callback job {callback}"));
    format!(
        "batch {}: {ended}, {} member{}: {} pending, {} done, {} dead, {} cancelled{callback}\n",
        batch.id,
        batch.members(),
        if batch.members() == 1 { "" } else { "s" },
        batch.pending,
        batch.done,
        batch.dead,
        batch.cancelled
    )
}

fn to_json(workflow: &Workflow) -> Value {
    json!({
        "job": workflow.job,
        "truncated": workflow.truncated,
        "jobs": workflow.jobs.iter().map(|job| json!({
            "id": job.id,
            "kind": job.kind,
            "queue": job.queue,
            "state": job.state.map(|state| state.as_str()),
            "batch_id": job.batch,
            "prerequisites": job.prerequisites,
        })).collect::<Vec<_>>(),
        "batch": workflow.batch.as_ref().map(|batch| json!({
            "id": batch.id,
            "callback": batch.callback,
            "created_at": batch.created_at.to_rfc3339(),
            "ended_at": batch.ended_at.map(|at| at.to_rfc3339()),
            "pending": batch.pending,
            "done": batch.done,
            "dead": batch.dead,
            "cancelled": batch.cancelled,
        })),
    })
}
