//! One job: its facts, payload, output (when done with one) and every attempt's error, with the
//! controls its state allows.

use axum::extract::{Path, Query, State};
use axum::Extension;
use jobs_core::JobId;
use jobs_core::OnFailure;
use jobs_postgres::admin::{self, JobDetails, JobState};
use maud::{html, Markup};

use crate::html::{action_button, notice, page, payload, Nav};
use crate::pages::Notice;
use crate::problem::Problem;
use crate::security::Visitor;
use crate::state::Console;
use crate::urls::percent_encode;

/// `GET /jobs/{id}`.
pub(crate) async fn show(
    State(console): State<Console>,
    Extension(visitor): Extension<Visitor>,
    Path(id): Path<String>,
    Query(query): Query<Notice>,
) -> Result<Markup, Problem> {
    let id: JobId = id
        .parse()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| Problem::BadRequest(format!("`{id}` is not a job id")))?;
    let job = admin::job_details(&console.pool, id)
        .await?
        .ok_or_else(|| {
            Problem::NotFound(format!(
                "There is no job {id}: it was never enqueued, or it was discarded or pruned by \
                 retention"
            ))
        })?;
    let config = &console.config;
    let id_text = id.to_string();
    let body = html! {
        @if let Some(done) = &query.done { (notice(done)) }
        dl class="facts" {
            dt { "State" } dd { span class="badge" id="state" { (job.state.as_str()) } }
            dt { "Kind" } dd {
                a href=(config.href(&format!("/jobs?kind={}", percent_encode(&job.kind)))) { (job.kind) }
                " · " a href=(config.href(&format!("/dead?kind={}", percent_encode(&job.kind)))) { "its dead letters" }
            }
            dt { "Queue" } dd { a href=(config.href(&format!("/jobs?queue={}", percent_encode(&job.queue)))) { (job.queue) } }
            dt { "Priority" } dd { (job.priority) }
            dt { "Attempts" } dd { (job.attempts) " of " (job.max_attempts) }
            dt { "Dedupe key" } dd {
                @match &job.dedupe_key {
                    Some(key) => { code { (key) } " (" (job.dedupe_scope.as_deref().unwrap_or("")) ")" }
                    None => span class="muted" { "none" },
                }
            }
            dt { "Enqueued" } dd { (job.created_at) }
            dt { "Due" } dd { (job.run_at) }
            dt { "Last attempt started" } dd { (job.attempted_at.as_deref().unwrap_or("–")) }
            dt { "Finished" } dd { (job.finished_at.as_deref().unwrap_or("–")) }
            @if let Some(lease) = &job.lease_expires_at {
                dt { "Lease expires" } dd { (lease) " (renewed by its worker's heartbeat)" }
            }
            @if let Some(at) = &job.cancel_requested_at {
                dt { "Cancel asked" } dd id="cancel-request" {
                    (at) " by " (job.cancel_requested_by.as_deref().unwrap_or("?"))
                    @if let Some(reason) = &job.cancel_reason { ": " (reason) }
                }
            }
            @if let Some(prerequisite) = job.cancelled_by_prerequisite {
                dt { "Cancelled by" } dd id="cancelled-by" {
                    "prerequisite " a href=(config.href(&format!("/jobs/{prerequisite}"))) { "job " (prerequisite) }
                    @if let Some(reason) = &job.cancel_reason { " (" (reason) ")" }
                }
            }
            @if let Some(batch) = job.batch_id {
                dt { "Batch" } dd id="batch" { "member of batch " (batch) }
            }
            @if let Some(batch) = job.callback_of {
                dt { "Batch" } dd id="batch" { "callback of batch " (batch) }
            }
        }
        div class="actions" {
            @if job.state == JobState::Ready {
                (action_button(&console, &visitor, "/jobs/run-now", "Run now", &[("id", &id_text)]))
                (action_button(&console, &visitor, "/jobs/cancel", "Cancel", &[("id", &id_text), ("confirm", "yes")]))
            }
            @if job.state == JobState::Waiting {
                (action_button(&console, &visitor, "/jobs/cancel", "Cancel", &[("id", &id_text), ("confirm", "yes")]))
            }
            @if job.state == JobState::Running && job.cancel_requested_at.is_none() {
                (action_button(&console, &visitor, "/jobs/cancel", "Ask to stop (cancel)", &[("id", &id_text), ("confirm", "yes")]))
            }
            @if job.state == JobState::Dead {
                (action_button(&console, &visitor, "/dead/replay", "Replay", &[("id", &id_text), ("confirm", "yes")]))
                (action_button(&console, &visitor, "/dead/discard", "Discard", &[("id", &id_text)]))
            }
        }
        (workflow_links(&console, &job))
        h2 { "Payload" }
        (payload(&console, &job.payload))
        @if let Some(output) = &job.output {
            h2 { "Output" }
            div id="output" { (payload(&console, output)) }
        }
        h2 { "Errors" }
        @if job.errors.is_empty() {
            p class="muted" { "No attempt failed." }
        } @else {
            table id="errors" {
                thead { tr { th class="num" { "Attempt" } th { "When" } th { "How" } th { "Error" } } }
                tbody {
                    @for record in &job.errors {
                        tr {
                            td class="num" { (record.attempt) }
                            td { (record.at) }
                            td { (record.kind) }
                            td { pre class="error" { (record.error) } }
                        }
                    }
                }
            }
        }
    };
    Ok(page(
        &console,
        Some(&visitor),
        Nav::None,
        &format!("Job {id}"),
        body,
    ))
}

/// The jobs `job` runs after and the jobs that run after it, as links, and a link to its
/// workflow; nothing for a job outside any workflow.
fn workflow_links(console: &Console, job: &JobDetails) -> Markup {
    let config = &console.config;
    let in_workflow = !job.prerequisites.is_empty()
        || job.dependent_count > 0
        || job.batch_id.is_some()
        || job.callback_of.is_some();
    html! {
        @if in_workflow {
            h2 { "Workflow" }
            p { a id="workflow" href=(config.href(&format!("/jobs/{}/workflow", job.id))) { "Every job of its workflow" } }
            @if !job.prerequisites.is_empty() {
                table id="prerequisites" {
                    thead { tr { th { "Runs after" } th { "Kind" } th { "State" } th { "If it fails" } } }
                    tbody {
                        @for prerequisite in &job.prerequisites {
                            tr {
                                td { a href=(config.href(&format!("/jobs/{}", prerequisite.id))) { "job " (prerequisite.id) } }
                                td { (prerequisite.kind.as_deref().unwrap_or("–")) }
                                td { span class="badge" { (prerequisite.state.map_or("gone", JobState::as_str)) } }
                                td { (match prerequisite.on_failure { OnFailure::Cancel => "cancel this job", OnFailure::Run => "run all the same" }) }
                            }
                        }
                    }
                }
            }
            @if job.dependent_count > 0 {
                table id="dependents" {
                    thead { tr { th { "Runs before" } th { "Kind" } th { "State" } } }
                    tbody {
                        @for dependent in &job.dependents {
                            tr {
                                td { a href=(config.href(&format!("/jobs/{}", dependent.id))) { "job " (dependent.id) } }
                                td { (dependent.kind) }
                                td { span class="badge" { (dependent.state.as_str()) } }
                            }
                        }
                    }
                }
                @if job.dependent_count > i64::try_from(job.dependents.len()).unwrap_or(i64::MAX) {
                    p class="muted" { (job.dependent_count) " in all: the workflow view lists them." }
                }
            }
        }
    }
}
