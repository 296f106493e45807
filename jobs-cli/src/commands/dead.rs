//! `jobs dead list|show|replay|discard`.

use std::future::Future;

use jobs_core::JobId;
use jobs_postgres::admin::{
    self, AdminError, AttemptRecord, Batch, DeadFilter, DeadJob, DiscardReport, HumanDuration,
    JobDetails, ReplayReport,
};
use jobs_postgres::PgPool;
use serde_json::{json, Value};

use super::job_refs::{by_kind, job_ref_json, jobs_table};
use super::{count, json_text, Report};
use crate::cli::{ConfirmArgs, DeadChange, FilterArgs, Selection};
use crate::confirm;
use crate::error::CliError;
use crate::escape::shown;
use crate::progress::Progress;
use crate::table::{Align, Table};

/// Dead jobs replayed or discarded per statement.
const BATCH: usize = admin::dead::BATCH_SIZE;
/// Longest error message shown in a list.
const ERROR_WIDTH: usize = 80;

/// `dead list`.
pub async fn list(
    pool: &PgPool,
    args: &FilterArgs,
    limit: usize,
    json: bool,
) -> Result<Report, CliError> {
    let filter = listing_filter(args);
    let jobs = admin::list_dead(pool, &filter, 0, limit).await?;
    let total = if jobs.len() < limit {
        jobs.len() as u64
    } else {
        admin::count_dead(pool, &filter).await?
    };
    if json {
        let jobs: Vec<Value> = jobs.iter().map(dead_job_json).collect();
        return Ok(Report::success(json_text(&json!({
            "jobs": jobs,
            "total": total,
        }))));
    }
    if jobs.is_empty() {
        return Ok(Report::success("no dead jobs\n".to_owned()));
    }
    let mut table = Table::new(&[
        ("ID", Align::Right),
        ("KIND", Align::Left),
        ("QUEUE", Align::Left),
        ("ATTEMPTS", Align::Right),
        ("DEAD FOR", Align::Right),
        ("LAST ERROR", Align::Left),
    ]);
    for job in &jobs {
        table.row(vec![
            job.id.to_string(),
            job.kind.clone(),
            job.queue.clone(),
            format!("{}/{}", job.attempts, job.max_attempts),
            HumanDuration(std::time::Duration::from_secs(job.dead_for.as_secs())).to_string(),
            job.last_error
                .as_ref()
                .map_or_else(|| "-".to_owned(), |error| shorten(&shown(&describe(error)))),
        ]);
    }
    let mut text = table.render();
    let shown = jobs.len() as u64;
    if shown < total {
        text.push_str(&format!(
            "showing {shown} of {total} dead jobs: narrow with --kind, --queue or --older-than, or raise --limit\n"
        ));
    } else {
        text.push_str(&format!("{}\n", count(jobs.len(), "dead job")));
    }
    Ok(Report::success(text))
}

/// `dead show`.
pub async fn show(pool: &PgPool, id: JobId, json: bool) -> Result<Report, CliError> {
    let job = admin::job_details(pool, id)
        .await?
        .ok_or(CliError::NoSuchJob(id))?;
    if json {
        return Ok(Report::success(json_text(&details_json(&job))));
    }
    let mut text = format!(
        "job {}: kind {} in queue {}, {}\n",
        job.id,
        shown(&job.kind),
        shown(&job.queue),
        job.state
    );
    let mut field =
        |name: &str, value: &str| text.push_str(&format!("  {name:<13}{}\n", shown(value)));
    field(
        "attempts",
        &format!("{} of {}", job.attempts, job.max_attempts),
    );
    field("priority", &job.priority.to_string());
    if let (Some(key), Some(scope)) = (&job.dedupe_key, &job.dedupe_scope) {
        field("dedupe key", &format!("{key} ({scope})"));
    }
    field("enqueued", &job.created_at);
    field("run at", &job.run_at);
    if let Some(at) = &job.attempted_at {
        field("last attempt", at);
    }
    if let Some(at) = &job.finished_at {
        field("finished", at);
    }
    if let Some(at) = &job.lease_expires_at {
        field("lease expires", at);
    }
    if let Some(at) = &job.cancel_requested_at {
        let by = job.cancel_requested_by.as_deref().unwrap_or("?");
        let reason = job
            .cancel_reason
            .as_ref()
            .map_or_else(String::new, |reason| format!(": {reason}"));
        field("cancel asked", &format!("{at} by {by}{reason}"));
    }
    if let Some(batch) = job.batch_id {
        field("batch", &format!("member of batch {batch}"));
    }
    if let Some(batch) = job.callback_of {
        field("batch", &format!("callback of batch {batch}"));
    }
    if let Some(prerequisite) = job.cancelled_by_prerequisite {
        field(
            "cancelled by",
            &format!("prerequisite job {prerequisite} failing"),
        );
    }
    field("payload", &job.payload.to_string());
    if let Some(output) = &job.output {
        field("output", &output.to_string());
    }
    text.push_str(&format!("errors ({}):\n", job.errors.len()));
    for error in &job.errors {
        text.push_str(&format!(
            "  #{} {} {}: {}\n",
            error.attempt,
            shown(&error.at),
            shown(&error.kind),
            shown(&error.error)
        ));
    }
    text.push_str(&links_text(&job));
    Ok(Report::success(text))
}

/// The jobs a job runs after and the jobs that run after it, one per line; nothing for a job
/// with neither.
fn links_text(job: &JobDetails) -> String {
    let mut text = String::new();
    if !job.prerequisites.is_empty() {
        text.push_str(&format!("runs after ({}):\n", job.prerequisites.len()));
        for prerequisite in &job.prerequisites {
            let what = match (&prerequisite.kind, prerequisite.state) {
                (Some(kind), Some(state)) => format!("{} {state}", shown(kind)),
                _ => "gone".to_owned(),
            };
            text.push_str(&format!(
                "  job {} {what} (on failure: {})\n",
                prerequisite.id,
                prerequisite.on_failure.as_str()
            ));
        }
    }
    if job.dependent_count > 0 {
        text.push_str(&format!("runs before ({}):\n", job.dependent_count));
        for dependent in &job.dependents {
            text.push_str(&format!(
                "  job {} {} {}\n",
                dependent.id,
                shown(&dependent.kind),
                dependent.state
            ));
        }
        let listed = i64::try_from(job.dependents.len()).unwrap_or(i64::MAX);
        if job.dependent_count > listed {
            text.push_str(&format!(
                "  ... and {} more (`jobs job workflow {}` lists them)\n",
                job.dependent_count - listed,
                job.id
            ));
        }
    }
    text
}

/// `dead replay`: replays the selection, or with `--dry-run` shows what a replay would do.
pub async fn replay(pool: &PgPool, args: DeadChange) -> Result<Report, CliError> {
    let (selection, change, confirm) = (&args.selection, args.change, args.confirm);
    let filter = selection_filter(selection);
    let report = if change.dry_run {
        admin::preview_replay(pool, &filter).await?
    } else {
        let total = admin::count_dead(pool, &filter).await?;
        confirm_broad(selection, "replay", total, confirm)?;
        in_batches(total, "replaying dead jobs", |after| {
            admin::replay_batch(pool, &filter, after, BATCH)
        })
        .await?
    };
    let not_dead = report.not_dead(&filter);
    if change.json {
        return Ok(Report::success(json_text(&json!({
            "dry_run": change.dry_run,
            "replayed": report.replayed.iter().map(job_ref_json).collect::<Vec<_>>(),
            "skipped": report.skipped.iter().map(|skipped| json!({
                "id": skipped.job.id,
                "kind": skipped.job.kind,
                "queue": skipped.job.queue,
                "dedupe_key": skipped.dedupe_key,
                "held_by": skipped.held_by,
            })).collect::<Vec<_>>(),
            "not_dead": not_dead,
        }))));
    }
    let mut text = if change.dry_run {
        jobs_table(&report.replayed)
    } else {
        String::new()
    };
    let (done, skip) = if change.dry_run {
        ("would replay", "would skip")
    } else {
        ("replayed", "skipped")
    };
    text.push_str(&if report.replayed.is_empty() {
        format!(
            "no dead jobs {}\n",
            if change.dry_run {
                "to replay"
            } else {
                "replayed"
            }
        )
    } else {
        format!(
            "{done} {}: {}\n",
            count(report.replayed.len(), "dead job"),
            by_kind(&report.replayed)
        )
    });
    for skipped in &report.skipped {
        text.push_str(&format!(
            "{skip} job {} (kind {}, queue {}): job {} holds its dedupe key \"{}\"; replay it once that job has finished\n",
            skipped.job.id,
            shown(&skipped.job.kind),
            shown(&skipped.job.queue),
            skipped.held_by,
            shown(&skipped.dedupe_key)
        ));
    }
    for id in not_dead {
        text.push_str(&format!("job {id} is not dead: nothing to replay\n"));
    }
    Ok(Report::success(text))
}

/// `dead discard`: deletes the selection, or with `--dry-run` shows what it would delete.
pub async fn discard(pool: &PgPool, args: DeadChange) -> Result<Report, CliError> {
    let (selection, change, confirm) = (&args.selection, args.change, args.confirm);
    let filter = selection_filter(selection);
    let discarded = if change.dry_run {
        admin::preview_discard(pool, &filter).await?.discarded
    } else {
        let total = admin::count_dead(pool, &filter).await?;
        confirm_broad(selection, "discard", total, confirm)?;
        in_batches(total, "discarding dead jobs", |after| {
            admin::discard_batch(pool, &filter, after, BATCH)
        })
        .await?
        .discarded
    };
    let not_dead: Vec<JobId> = filter
        .requested_ids()
        .unwrap_or_default()
        .iter()
        .copied()
        .filter(|id| !discarded.iter().any(|job| job.id == *id))
        .collect();
    if change.json {
        return Ok(Report::success(json_text(&json!({
            "dry_run": change.dry_run,
            "discarded": discarded.iter().map(job_ref_json).collect::<Vec<_>>(),
            "not_dead": not_dead,
        }))));
    }
    let mut text = if change.dry_run {
        jobs_table(&discarded)
    } else {
        String::new()
    };
    text.push_str(&if discarded.is_empty() {
        format!(
            "no dead jobs {}\n",
            if change.dry_run {
                "to discard"
            } else {
                "discarded"
            }
        )
    } else {
        format!(
            "{} {}: {}\n",
            if change.dry_run {
                "would discard"
            } else {
                "discarded"
            },
            count(discarded.len(), "dead job"),
            by_kind(&discarded)
        )
    });
    for id in not_dead {
        text.push_str(&format!("job {id} is not dead: nothing to discard\n"));
    }
    Ok(Report::success(text))
}

/// Asks before `verb`ing `total` dead jobs when the selection names no ids (see
/// [`confirm`](crate::confirm)).
fn confirm_broad(
    selection: &Selection,
    verb: &str,
    total: u64,
    confirm: ConfirmArgs,
) -> Result<(), CliError> {
    if !selection.ids.is_empty() {
        return Ok(());
    }
    let what = describe_selection(selection);
    let action = format!("{verb} {what} (no --id given)");
    if confirm::must_ask(&action, confirm.yes)? && total > 0 {
        let jobs = count(usize::try_from(total).unwrap_or(usize::MAX), "dead job");
        confirm::ask(&format!("{verb} {jobs}: {what}"))?;
    }
    Ok(())
}

/// `"every dead job"`, `"the dead jobs of kind K in queue Q dead for at least 7d"`.
fn describe_selection(selection: &Selection) -> String {
    let mut text = String::from("the dead jobs");
    if let Some(kind) = &selection.kind {
        text.push_str(&format!(" of kind {}", shown(kind)));
    }
    if let Some(queue) = &selection.queue {
        text.push_str(&format!(" in queue {}", shown(queue)));
    }
    if let Some(age) = selection.older_than {
        text.push_str(&format!(" dead for at least {}", HumanDuration(age)));
    }
    if text == "the dead jobs" {
        "every dead job".to_owned()
    } else {
        text
    }
}

fn listing_filter(args: &FilterArgs) -> DeadFilter {
    narrow(
        DeadFilter::all(),
        args.kind.as_deref(),
        args.queue.as_deref(),
        args.older_than,
    )
}

fn selection_filter(selection: &Selection) -> DeadFilter {
    let filter = if selection.ids.is_empty() {
        DeadFilter::all()
    } else {
        DeadFilter::all().ids(selection.ids.iter().copied())
    };
    narrow(
        filter,
        selection.kind.as_deref(),
        selection.queue.as_deref(),
        selection.older_than,
    )
}

fn narrow(
    mut filter: DeadFilter,
    kind: Option<&str>,
    queue: Option<&str>,
    older_than: Option<std::time::Duration>,
) -> DeadFilter {
    if let Some(kind) = kind {
        filter = filter.kind(kind);
    }
    if let Some(queue) = queue {
        filter = filter.queue(queue);
    }
    if let Some(age) = older_than {
        filter = filter.dead_for_at_least(age);
    }
    filter
}

pub(super) fn describe(error: &AttemptRecord) -> String {
    format!("{}: {}", error.kind, error.error)
}

pub(super) fn shorten(text: &str) -> String {
    if text.chars().count() <= ERROR_WIDTH {
        return text.to_owned();
    }
    let mut short: String = text.chars().take(ERROR_WIDTH - 3).collect();
    short.push_str("...");
    short
}

pub(super) fn attempt_json(error: &AttemptRecord) -> Value {
    json!({
        "attempt": error.attempt,
        "at": error.at,
        "kind": error.kind,
        "error": error.error,
    })
}

fn dead_job_json(job: &DeadJob) -> Value {
    json!({
        "id": job.id,
        "kind": job.kind,
        "queue": job.queue,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "dedupe_key": job.dedupe_key,
        "dead_for_secs": job.dead_for.as_secs_f64(),
        "error_count": job.error_count,
        "last_error": job.last_error.as_ref().map(attempt_json),
    })
}

fn details_json(job: &JobDetails) -> Value {
    json!({
        "id": job.id,
        "kind": job.kind,
        "queue": job.queue,
        "state": job.state.as_str(),
        "priority": job.priority,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "payload": job.payload,
        "dedupe_key": job.dedupe_key,
        "dedupe_scope": job.dedupe_scope,
        "created_at": job.created_at,
        "run_at": job.run_at,
        "attempted_at": job.attempted_at,
        "finished_at": job.finished_at,
        "lease_expires_at": job.lease_expires_at,
        "cancel_requested_at": job.cancel_requested_at,
        "cancel_requested_by": job.cancel_requested_by,
        "cancel_reason": job.cancel_reason,
        "output": job.output,
        "errors": job.errors.iter().map(attempt_json).collect::<Vec<_>>(),
        "prerequisites": job.prerequisites.iter().map(|prerequisite| json!({
            "id": prerequisite.id,
            "kind": prerequisite.kind,
            "state": prerequisite.state.map(|state| state.as_str()),
            "on_failure": prerequisite.on_failure.as_str(),
        })).collect::<Vec<_>>(),
        "dependents": job.dependents.iter().map(|dependent| json!({
            "id": dependent.id,
            "kind": dependent.kind,
            "state": dependent.state.as_str(),
        })).collect::<Vec<_>>(),
        "dependent_count": job.dependent_count,
        "batch_id": job.batch_id,
        "callback_of": job.callback_of,
        "cancelled_by_prerequisite": job.cancelled_by_prerequisite,
    })
}

/// What a batch of a replay or discard adds up to.
trait BatchReport: Default {
    /// Adds another batch's report to this one; returns how many jobs that batch touched.
    fn add(&mut self, batch: Self) -> usize;
}

impl BatchReport for ReplayReport {
    fn add(&mut self, batch: Self) -> usize {
        let touched = batch.replayed.len() + batch.skipped.len();
        self.merge(batch);
        touched
    }
}

impl BatchReport for DiscardReport {
    fn add(&mut self, batch: Self) -> usize {
        let touched = batch.discarded.len();
        self.merge(batch);
        touched
    }
}

/// Runs `one_batch` from the first dead job until the selection of `total` jobs is exhausted,
/// showing progress as `label`, and returns the batches' reports added up.
async fn in_batches<R, Next>(
    total: u64,
    label: &str,
    mut one_batch: impl FnMut(JobId) -> Next,
) -> Result<R, CliError>
where
    R: BatchReport,
    Next: Future<Output = Result<Batch<R>, AdminError>>,
{
    let mut report = R::default();
    if total == 0 {
        return Ok(report);
    }
    let progress = Progress::bar(total, label);
    let mut after = 0;
    loop {
        let batch = one_batch(after).await?;
        progress.advance(report.add(batch.report) as u64);
        match batch.resume_after {
            Some(next) => after = next,
            None => return Ok(report),
        }
    }
}
