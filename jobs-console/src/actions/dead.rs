//! Replaying and discarding dead jobs: the selected ones, or every one a filter selects. Both
//! show a preview (what would change, with the count) and change nothing until confirmed.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use jobs_core::JobId;
use jobs_postgres::admin::{self, DeadFilter, JobRef};
use maud::html;
use serde::Deserialize;

use super::{done, jobs};
use crate::audit;
use crate::forms::CheckedForm;
use crate::html::{csrf_field, page, Nav};
use crate::pages::dead::dead_filter;
use crate::problem::Problem;
use crate::security::Visitor;
use crate::state::Console;

/// Jobs listed by id in a preview; the rest are counted.
const LISTED: usize = 50;

/// Which dead jobs: the ids given, or (with none) those of the kind and queue given.
#[derive(Debug, Deserialize)]
pub(crate) struct Selection {
    #[serde(default)]
    id: Vec<JobId>,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    queue: String,
    /// Sent by the forms of ticked jobs: the ids are the whole selection, and none is an error
    /// (not every dead job).
    #[serde(default)]
    selected: bool,
    /// `yes` once the preview was confirmed.
    confirm: Option<String>,
}

impl Selection {
    /// Refuses a selection of ticked jobs with none ticked.
    fn check(&self) -> Result<(), Problem> {
        if self.selected && self.id.is_empty() {
            return Err(Problem::BadRequest(
                "No job is selected: tick the jobs to act on".into(),
            ));
        }
        Ok(())
    }

    fn filter(&self) -> DeadFilter {
        if !self.id.is_empty() {
            return DeadFilter::all().ids(self.id.iter().copied());
        }
        dead_filter(&self.kind, &self.queue)
    }

    fn describe(&self) -> String {
        if !self.id.is_empty() {
            let ids: Vec<String> = self.id.iter().map(ToString::to_string).collect();
            return format!("ids {}", ids.join(","));
        }
        match (self.kind.trim(), self.queue.trim()) {
            ("", "") => "every dead job".to_owned(),
            (kind, "") => format!("kind {kind}"),
            ("", queue) => format!("queue {queue}"),
            (kind, queue) => format!("kind {kind} in queue {queue}"),
        }
    }

    fn confirmed(&self) -> bool {
        self.confirm.as_deref() == Some("yes")
    }
}

/// `POST /dead/replay`.
pub(crate) async fn replay(
    State(console): State<Console>,
    form: CheckedForm<Selection>,
) -> Result<Response, Problem> {
    let CheckedForm { visitor, fields } = form;
    fields.check()?;
    let filter = fields.filter();
    if !fields.confirmed() {
        let preview = admin::preview_replay(&console.pool, &filter).await?;
        let skipped: Vec<JobRef> = preview.skipped.into_iter().map(|skip| skip.job).collect();
        return Ok(confirm_page(
            &console,
            &visitor,
            &fields,
            Change::Replay,
            &preview.replayed,
            &skipped,
        ));
    }
    let report = admin::replay(&console.pool, &filter).await?;
    let what = format!(
        "Replayed {} ({} skipped: their dedupe key is held by another job)",
        jobs(report.replayed.len()),
        report.skipped.len()
    );
    audit::record(
        &visitor.actor,
        "replay dead jobs",
        &fields.describe(),
        &what,
    );
    Ok(done(&console, "/dead", &what).into_response())
}

/// `POST /dead/discard`.
pub(crate) async fn discard(
    State(console): State<Console>,
    form: CheckedForm<Selection>,
) -> Result<Response, Problem> {
    let CheckedForm { visitor, fields } = form;
    fields.check()?;
    let filter = fields.filter();
    if !fields.confirmed() {
        let preview = admin::preview_discard(&console.pool, &filter).await?;
        return Ok(confirm_page(
            &console,
            &visitor,
            &fields,
            Change::Discard,
            &preview.discarded,
            &[],
        ));
    }
    let report = admin::discard(&console.pool, &filter).await?;
    let what = format!("Discarded {}", jobs(report.discarded.len()));
    audit::record(
        &visitor.actor,
        "discard dead jobs",
        &fields.describe(),
        &what,
    );
    Ok(done(&console, "/dead", &what).into_response())
}

/// Which change a preview is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Replay,
    Discard,
}

/// What a change would do, and the form that confirms it (the same selection, confirmed).
fn confirm_page(
    console: &Console,
    visitor: &Visitor,
    selection: &Selection,
    change: Change,
    changed: &[JobRef],
    skipped: &[JobRef],
) -> Response {
    let (verb, path, title) = match change {
        Change::Replay => ("Replay", "/dead/replay", "Replay dead jobs?"),
        Change::Discard => ("Discard", "/dead/discard", "Discard dead jobs?"),
    };
    let body = html! {
        p id="preview-count" {
            strong { (verb) " " (jobs(changed.len())) }
            " (" (selection.describe()) ")"
            @if change == Change::Discard { ": they are deleted for good, with their error history." }
            @if change == Change::Replay { ": each is made ready at once with its attempts reset; its error history is kept." }
        }
        @if !skipped.is_empty() {
            p { (jobs(skipped.len())) " would be skipped: another job holds their dedupe key." }
        }
        @if changed.is_empty() {
            p class="muted" { "Nothing to do: no dead job is selected (any more)." }
        } @else {
            table id="preview" {
                thead { tr { th class="num" { "Id" } th { "Kind" } th { "Queue" } } }
                tbody {
                    @for job in changed.iter().take(LISTED) {
                        tr { td class="num" { (job.id) } td { (job.kind) } td { (job.queue) } }
                    }
                }
            }
            @if changed.len() > LISTED { p class="muted" { "and " (changed.len() - LISTED) " more." } }
            div class="actions" {
                form method="post" action=(console.config.href(path)) class="inline" {
                    (csrf_field(visitor))
                    @for id in &selection.id { input type="hidden" name="id" value=(id); }
                    input type="hidden" name="kind" value=(selection.kind);
                    input type="hidden" name="queue" value=(selection.queue);
                    input type="hidden" name="confirm" value="yes";
                    button type="submit" id="confirm" class=(if change == Change::Discard { "danger" } else { "primary" }) {
                        (verb) " " (jobs(changed.len()))
                    }
                }
                a href=(console.config.href("/dead")) { "Cancel" }
            }
            p class="muted" { "Jobs that die, or are replayed, before you confirm make the result differ from this preview." }
        }
    };
    page(console, Some(visitor), Nav::Dead, title, body).into_response()
}
