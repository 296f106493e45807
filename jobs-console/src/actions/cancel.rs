//! Cancelling jobs: one from its page, the selected ones, or every ready job a filter selects.
//! Ready jobs are cancelled at once; running ones are asked to stop. An action on many jobs shows
//! what it would do, with the count, and changes nothing until confirmed.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use jobs_core::JobId;
use jobs_postgres::admin::{self, CancelFilter, CancelNote, CancelReport, ReadyState};
use maud::html;
use serde::Deserialize;

use super::{done, jobs};
use crate::audit;
use crate::forms::CheckedForm;
use crate::html::{csrf_field, page, Nav};
use crate::problem::Problem;
use crate::security::Visitor;
use crate::state::Console;

/// Which jobs to cancel: the ids given, or (with none) the ready jobs of the kind, queue and
/// state given; and why.
#[derive(Debug, Deserialize)]
pub(crate) struct CancelSelection {
    #[serde(default)]
    id: Vec<JobId>,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    queue: String,
    /// `ready` (due) or `scheduled`; empty for both.
    #[serde(default)]
    state: String,
    #[serde(default)]
    reason: String,
    /// Sent by the forms of ticked jobs: the ids are the whole selection, and none is an error.
    #[serde(default)]
    selected: bool,
    /// `yes` once confirmed (or for one job, from its page).
    confirm: Option<String>,
}

impl CancelSelection {
    fn filter(&self) -> Result<CancelFilter, Problem> {
        let mut filter = CancelFilter::new();
        if !self.kind.trim().is_empty() {
            filter = filter.kind(self.kind.trim());
        }
        if !self.queue.trim().is_empty() {
            filter = filter.queue(self.queue.trim());
        }
        match self.state.trim() {
            "" => {}
            "ready" => filter = filter.state(ReadyState::Due),
            "scheduled" => filter = filter.state(ReadyState::Scheduled),
            other => {
                return Err(Problem::BadRequest(format!(
                    "`{other}` is not a state jobs are cancelled in by filter: ready or scheduled"
                )))
            }
        }
        Ok(filter)
    }

    fn describe(&self) -> String {
        if !self.id.is_empty() {
            let ids: Vec<String> = self.id.iter().map(ToString::to_string).collect();
            return format!("ids {}", ids.join(","));
        }
        let mut parts = Vec::new();
        for (name, value) in [
            ("kind", &self.kind),
            ("queue", &self.queue),
            ("state", &self.state),
        ] {
            if !value.trim().is_empty() {
                parts.push(format!("{name} {}", value.trim()));
            }
        }
        format!("ready jobs of {}", parts.join(", "))
    }

    fn note(&self, visitor: &Visitor) -> CancelNote {
        let note = CancelNote::by(visitor.actor.clone());
        match self.reason.trim() {
            "" => note,
            reason => note.reason(reason),
        }
    }
}

/// `POST /jobs/cancel`.
pub(crate) async fn cancel(
    State(console): State<Console>,
    form: CheckedForm<CancelSelection>,
) -> Result<Response, Problem> {
    let CheckedForm { visitor, fields } = form;
    if fields.selected && fields.id.is_empty() {
        return Err(Problem::BadRequest(
            "No job is selected: tick the jobs to act on".into(),
        ));
    }
    let confirmed = fields.confirm.as_deref() == Some("yes");
    let note = fields.note(&visitor);
    if !fields.id.is_empty() {
        if !confirmed {
            return Ok(confirm_page(
                &console,
                &visitor,
                &fields,
                fields.id.len() as u64,
            ));
        }
        let report = admin::cancel(&console.pool, &fields.id, &note).await?;
        let what = summary(&report);
        audit::record(&visitor.actor, "cancel jobs", &fields.describe(), &what);
        let back = match fields.id.as_slice() {
            [one] => format!("/jobs/{one}"),
            _ => "/jobs".to_owned(),
        };
        return Ok(done(&console, &back, &what).into_response());
    }
    let filter = fields.filter()?;
    if !confirmed {
        let count = admin::preview_cancel(&console.pool, &filter).await?;
        return Ok(confirm_page(&console, &visitor, &fields, count));
    }
    let report = admin::cancel_matching(&console.pool, &filter, &note).await?;
    let what = summary(&report);
    audit::record(&visitor.actor, "cancel jobs", &fields.describe(), &what);
    Ok(done(&console, "/jobs", &what).into_response())
}

/// What a cancellation did, in a sentence.
fn summary(report: &CancelReport) -> String {
    let mut what = format!("Cancelled {}", jobs(report.cancelled.len()));
    if !report.requested.is_empty() {
        what.push_str(&format!(
            "; asked {} running to stop",
            jobs(report.requested.len())
        ));
    }
    if !report.not_cancellable.is_empty() {
        what.push_str(&format!(
            "; {} already finished or unknown, left alone",
            jobs(report.not_cancellable.len())
        ));
    }
    what
}

/// What a cancellation would do, and the form that confirms it.
fn confirm_page(
    console: &Console,
    visitor: &Visitor,
    selection: &CancelSelection,
    count: u64,
) -> Response {
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    let body = html! {
        p id="preview-count" {
            strong { "Cancel " (jobs(count)) }
            " (" (selection.describe()) ")"
            @if selection.id.is_empty() {
                ": ready jobs, due or scheduled, are cancelled at once and no worker runs them."
            } @else {
                " selected: ready ones are cancelled at once; running ones are asked to stop; finished ones are left alone."
            }
        }
        @if count == 0 {
            p class="muted" { "Nothing to do: no job is selected (any more)." }
        } @else {
            form method="post" action=(console.config.href("/jobs/cancel")) class="actions" {
                (csrf_field(visitor))
                @for id in &selection.id { input type="hidden" name="id" value=(id); }
                input type="hidden" name="kind" value=(selection.kind);
                input type="hidden" name="queue" value=(selection.queue);
                input type="hidden" name="state" value=(selection.state);
                input type="hidden" name="confirm" value="yes";
                label { "Reason (kept on each job) " input type="text" name="reason" value=(selection.reason) maxlength="1000"; }
                button type="submit" id="confirm" class="danger" { "Cancel " (jobs(count)) }
                a href=(console.config.href("/jobs")) { "Back" }
            }
            @if selection.id.is_empty() {
                p class="muted" { "Jobs that become ready before you confirm (enqueued, retried) are cancelled too if the filter selects them." }
            }
        }
    };
    page(console, Some(visitor), Nav::Jobs, "Cancel jobs?", body).into_response()
}
