//! `jobs job list|show|run-now|cancel`: jobs of any state.

use chrono::{DateTime, SecondsFormat, Utc};
use jobs_core::JobId;
use jobs_postgres::admin::{
    self, CancelFilter, CancelNote, CancelReport, HumanDuration, JobFilter, JobSummary,
    PageRequest, ReadyState, CANCEL_BATCH_SIZE,
};
use jobs_postgres::PgPool;
use serde_json::{json, Value};

use super::dead::{attempt_json, describe, shorten};
use super::job_refs::{by_kind, job_ref_json};
use super::queue::operator;
use super::{count, json_text, Report};
use crate::cli::{CancelState, JobCancel, JobListArgs};
use crate::confirm;
use crate::error::CliError;
use crate::escape::shown;
use crate::progress::Progress;
use crate::table::{Align, Table};

/// `job list`: one page of the jobs the arguments select, and the cursor of the next.
pub async fn list(pool: &PgPool, args: &JobListArgs) -> Result<Report, CliError> {
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
pub async fn run_now(pool: &PgPool, ids: &[JobId], json: bool) -> Result<Report, CliError> {
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

/// `job cancel`: by id, by kind and dedupe key, or by filter (see [`JobCancel`]).
pub async fn cancel(pool: &PgPool, args: JobCancel) -> Result<Report, CliError> {
    let mut note = CancelNote::by(args.by.clone().unwrap_or_else(operator));
    if let Some(reason) = &args.reason {
        note = note.reason(reason.as_str());
    }
    if !args.ids.is_empty() {
        let report = admin::cancel(pool, &args.ids, &note).await?;
        return Ok(Report::success(render(
            &report,
            args.change.json,
            String::new(),
        )));
    }
    if let (Some(kind), Some(key)) = (&args.kind, &args.dedupe_key) {
        let report = admin::cancel_by_dedupe_key(pool, kind, key, &note).await?;
        let nobody = format!(
            "no job of kind {} holds dedupe key \"{}\": nothing to cancel\n",
            shown(kind),
            shown(key)
        );
        return Ok(Report::success(render(&report, args.change.json, nobody)));
    }
    cancel_matching(pool, &args, &note).await
}

/// `job cancel` by filter: counts, asks, then cancels batch after batch with progress.
async fn cancel_matching(
    pool: &PgPool,
    args: &JobCancel,
    note: &CancelNote,
) -> Result<Report, CliError> {
    let filter = filter_of(args);
    let what = describe_cancel(args);
    let total = admin::preview_cancel(pool, &filter).await?;
    let jobs = count(usize::try_from(total).unwrap_or(usize::MAX), "ready job");
    if args.change.dry_run {
        if args.change.json {
            return Ok(Report::success(json_text(&json!({
                "dry_run": true,
                "would_cancel": total,
            }))));
        }
        return Ok(Report::success(format!("would cancel {jobs}: {what}\n")));
    }
    let action = format!("cancel {what}");
    if confirm::must_ask(&action, args.confirm.yes)? && total > 0 {
        confirm::ask(&format!("cancel {jobs}: {what}"))?;
    }
    let mut report = CancelReport::default();
    let progress = Progress::bar(total, "cancelling jobs");
    loop {
        let batch = admin::cancel_matching_batch(pool, &filter, note, CANCEL_BATCH_SIZE).await?;
        let cancelled = batch.cancelled.len();
        progress.advance(cancelled as u64);
        report.merge(batch);
        // A short batch may leave jobs behind (rows claimed meanwhile are skipped): stop only
        // when none is left.
        if cancelled == 0 {
            break;
        }
    }
    drop(progress);
    if args.change.json {
        return Ok(Report::success(json_text(&json!({
            "dry_run": false,
            "cancelled": report.cancelled.iter().map(job_ref_json).collect::<Vec<_>>(),
        }))));
    }
    Ok(Report::success(if report.cancelled.is_empty() {
        format!("no job cancelled: no {}\n", what.trim_start_matches("the "))
    } else {
        format!(
            "cancelled {}: {}\n",
            count(report.cancelled.len(), "job"),
            by_kind(&report.cancelled)
        )
    }))
}

/// The filter the arguments give (only called without ids or a dedupe key).
fn filter_of(args: &JobCancel) -> CancelFilter {
    let mut filter = if args.all {
        CancelFilter::every_ready_job()
    } else {
        CancelFilter::new()
    };
    if let Some(kind) = &args.kind {
        filter = filter.kind(kind.as_str());
    }
    if let Some(queue) = &args.queue {
        filter = filter.queue(queue.as_str());
    }
    if let Some(state) = args.state {
        filter = filter.state(match state {
            CancelState::Ready => ReadyState::Due,
            CancelState::Scheduled => ReadyState::Scheduled,
        });
    }
    if let Some(age) = args.older_than {
        filter = filter.enqueued_at_least(age);
    }
    filter
}

/// `"the scheduled jobs of kind K in queue Q enqueued at least 1h ago"`, `"every ready job"`.
fn describe_cancel(args: &JobCancel) -> String {
    let mut text = match args.state {
        Some(CancelState::Ready) => String::from("the ready jobs due now"),
        Some(CancelState::Scheduled) => String::from("the scheduled jobs"),
        None => String::from("the ready jobs"),
    };
    if let Some(kind) = &args.kind {
        text.push_str(&format!(" of kind {}", shown(kind)));
    }
    if let Some(queue) = &args.queue {
        text.push_str(&format!(" in queue {}", shown(queue)));
    }
    if let Some(age) = args.older_than {
        text.push_str(&format!(" enqueued at least {} ago", HumanDuration(age)));
    }
    if text == "the ready jobs" {
        String::from("every ready job")
    } else {
        text
    }
}

/// A cancellation by id or dedupe key, as sentences (`nothing` when it selected no job) or JSON.
fn render(report: &CancelReport, json: bool, nothing: String) -> String {
    if json {
        return json_text(&json!({
            "cancelled": report.cancelled.iter().map(job_ref_json).collect::<Vec<_>>(),
            "requested": report.requested.iter().map(job_ref_json).collect::<Vec<_>>(),
            "not_cancellable": report.not_cancellable.iter().map(|job| json!({
                "id": job.id,
                "state": job.state.map(|state| state.as_str()),
            })).collect::<Vec<Value>>(),
        }));
    }
    let mut text = String::new();
    if !report.cancelled.is_empty() {
        text.push_str(&format!(
            "cancelled {}: {}\n",
            count(report.cancelled.len(), "job"),
            by_kind(&report.cancelled)
        ));
    }
    if !report.requested.is_empty() {
        text.push_str(&format!(
            "asked {} to stop: {} (each ends cancelled unless its run succeeds)\n",
            count(report.requested.len(), "running job"),
            by_kind(&report.requested)
        ));
    }
    for job in &report.not_cancellable {
        text.push_str(&match job.state {
            Some(state) => format!("job {} is {state}: nothing to cancel\n", job.id),
            None => format!("no job {}: nothing to cancel\n", job.id),
        });
    }
    if text.is_empty() {
        nothing
    } else {
        text
    }
}
