//! `jobs job list|show|run-now`: jobs of any state.

use chrono::{DateTime, SecondsFormat, Utc};
use jobs_core::JobId;
use jobs_postgres::admin::{self, JobFilter, JobSummary, PageRequest};
use jobs_postgres::PgPool;
use serde_json::{json, Value};

use super::dead::{attempt_json, describe, shorten};
use super::job_refs::{by_kind, job_ref_json};
use super::{count, json_text, Report};
use crate::cli::JobListArgs;
use crate::escape::shown;
use crate::table::{Align, Table};

/// `job list`: one page of the jobs the arguments select, and the cursor of the next.
pub async fn list(pool: &PgPool, args: &JobListArgs) -> Result<Report, crate::error::CliError> {
    let page = PageRequest {
        limit: args.limit,
        after: args.after,
    };
    let found = admin::find_jobs(pool, &filter(args), &page).await?;
    let next = found.next.map(|cursor| cursor.to_string());
    if args.json {
        return Ok(Report::success(json_text(&json!({
            "jobs": found.jobs.iter().map(summary_json).collect::<Vec<_>>(),
            "next": next,
            "examination_bounded": found.examination_bounded,
        }))));
    }
    let mut text = String::new();
    if !found.jobs.is_empty() {
        let mut table = Table::new(&[
            ("ID", Align::Right),
            ("KIND", Align::Left),
            ("QUEUE", Align::Left),
            ("STATE", Align::Left),
            ("ATTEMPTS", Align::Right),
            ("ENQUEUED", Align::Left),
            ("FINISHED", Align::Left),
            ("LAST ERROR", Align::Left),
        ]);
        for job in &found.jobs {
            table.row(vec![
                job.id.to_string(),
                job.kind.clone(),
                job.queue.clone(),
                job.status.to_string(),
                format!("{}/{}", job.attempts, job.max_attempts),
                moment(job.created_at),
                job.finished_at.map_or_else(|| "-".to_owned(), moment),
                job.last_error
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |error| shorten(&shown(&describe(error)))),
            ]);
        }
        text.push_str(&table.render());
    }
    match (&next, found.examination_bounded) {
        (Some(next), true) => text.push_str(&format!(
            "{}; examined {} jobs without filling the page, more may match: go on with --after {next}{}\n",
            if found.jobs.is_empty() { "no jobs match so far".to_owned() } else { count(found.jobs.len(), "job") },
            admin::find::MAX_EXAMINED,
            if args.kind.is_none() { " (or narrow with --kind)" } else { "" },
        )),
        (Some(next), false) => text.push_str(&format!(
            "{}; next page: --after {next}\n",
            count(found.jobs.len(), "job")
        )),
        (None, _) if found.jobs.is_empty() => text.push_str("no jobs match\n"),
        (None, _) => text.push_str(&format!("{}\n", count(found.jobs.len(), "job"))),
    }
    Ok(Report::success(text))
}

/// The search the arguments of `job list` ask for.
fn filter(args: &JobListArgs) -> JobFilter {
    let mut filter = JobFilter::all();
    if let Some(id) = args.id {
        filter = filter.id(id);
    }
    if let Some(kind) = &args.kind {
        filter = filter.kind(kind.clone());
    }
    if let Some(queue) = &args.queue {
        filter = filter.queue(queue.clone());
    }
    if let Some(status) = args.state {
        filter = filter.status(status);
    }
    if let Some(key) = &args.dedupe_key {
        filter = filter.dedupe_key(key.clone());
    }
    if let Some(at) = args.since {
        filter = filter.created_since(at);
    }
    if let Some(at) = args.until {
        filter = filter.created_until(at);
    }
    if let Some(at) = args.finished_since {
        filter = filter.finished_since(at);
    }
    if let Some(at) = args.finished_until {
        filter = filter.finished_until(at);
    }
    if let Some(text) = &args.error {
        filter = filter.error_text(text.clone());
    }
    filter
}

/// A time as a table shows it: UTC to the second.
fn moment(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%SZ").to_string()
}

/// A job of a page as JSON; times in RFC 3339, UTC.
fn summary_json(job: &JobSummary) -> Value {
    let time = |at: DateTime<Utc>| at.to_rfc3339_opts(SecondsFormat::Micros, true);
    json!({
        "id": job.id,
        "kind": job.kind,
        "queue": job.queue,
        "state": job.status.as_str(),
        "priority": job.priority,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "run_at": time(job.run_at),
        "created_at": time(job.created_at),
        "finished_at": job.finished_at.map(time),
        "dedupe_key": job.dedupe_key,
        "error_count": job.error_count,
        "last_error": job.last_error.as_ref().map(attempt_json),
    })
}

/// Makes the waiting jobs among `ids` due now; lists those that were not waiting.
pub async fn run_now(
    pool: &PgPool,
    ids: &[JobId],
    json: bool,
) -> Result<Report, crate::error::CliError> {
    let report = admin::run_now(pool, ids).await?;
    if json {
        return Ok(Report::success(json_text(&json!({
            "made_due": report.made_due.iter().map(job_ref_json).collect::<Vec<_>>(),
            "not_waiting": report.not_waiting,
        }))));
    }
    let mut text = if report.made_due.is_empty() {
        String::from("no job made due\n")
    } else {
        format!(
            "made {} due now: {}\n",
            count(report.made_due.len(), "job"),
            by_kind(&report.made_due)
        )
    };
    for id in &report.not_waiting {
        text.push_str(&format!(
            "job {id} is not waiting for a later time (due already, running, finished, dead or missing): nothing to do\n"
        ));
    }
    Ok(Report::success(text))
}
