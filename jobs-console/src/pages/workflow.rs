//! A job's workflow: every job connected to it through dependencies, with its state and the
//! jobs it runs after, and the batch it is a member or the callback of.

use axum::extract::{Path, Query, State};
use axum::Extension;
use jobs_core::JobId;
use jobs_postgres::admin::{self, JobState, DEFAULT_WORKFLOW_LIMIT, MAX_WORKFLOW_LIMIT};
use maud::{html, Markup};
use serde::Deserialize;

use crate::html::{page, Nav};
use crate::problem::Problem;
use crate::security::Visitor;
use crate::state::Console;

/// The query of the workflow page.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct WorkflowQuery {
    /// Most jobs listed (default [`DEFAULT_WORKFLOW_LIMIT`]).
    limit: Option<String>,
}

/// `GET /jobs/{id}/workflow`.
pub(crate) async fn show(
    State(console): State<Console>,
    Extension(visitor): Extension<Visitor>,
    Path(id): Path<String>,
    Query(query): Query<WorkflowQuery>,
) -> Result<Markup, Problem> {
    let id: JobId = id
        .parse()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| Problem::BadRequest(format!("`{id}` is not a job id")))?;
    let limit = match query.limit.as_deref().map(str::trim) {
        None | Some("") => DEFAULT_WORKFLOW_LIMIT,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|limit| (1..=MAX_WORKFLOW_LIMIT).contains(limit))
            .ok_or_else(|| {
                Problem::BadRequest(format!(
                    "`{text}` is not a number of jobs from 1 to {MAX_WORKFLOW_LIMIT}"
                ))
            })?,
    };
    let workflow = admin::workflow(&console.pool, id, limit)
        .await?
        .ok_or_else(|| {
            Problem::NotFound(format!(
                "There is no job {id}: it was never enqueued, or it was discarded or pruned by \
                 retention"
            ))
        })?;
    let config = &console.config;
    let link = |job: JobId| {
        html! { a href=(config.href(&format!("/jobs/{job}"))) { (job) } }
    };
    let body = html! {
        p {
            "The jobs connected to " a href=(config.href(&format!("/jobs/{id}"))) { "job " (id) }
            " through dependencies: what they run after, and what runs after them."
        }
        @if let Some(batch) = &workflow.batch {
            dl class="facts" id="batch" {
                dt { "Batch" } dd { (batch.id) " · " @if batch.ended_at.is_some() { "ended" } @else { "open" } }
                dt { "Members" } dd {
                    (batch.members()) " in all: " (batch.pending) " pending, " (batch.done) " done, "
                    (batch.dead) " dead, " (batch.cancelled) " cancelled"
                }
                dt { "Callback" } dd {
                    @match batch.callback {
                        Some(callback) => { "job " (link(callback)) }
                        None => span class="muted" { "none" },
                    }
                }
            }
        }
        table id="workflow-jobs" {
            thead { tr {
                th class="num" { "Job" } th { "Kind" } th { "Queue" } th { "State" } th { "Runs after" }
            } }
            tbody {
                @for job in &workflow.jobs {
                    tr data-job=(job.id) class=[(job.id == id).then_some("current")] {
                        td class="num" { (link(job.id)) }
                        td { (job.kind.as_deref().unwrap_or("–")) }
                        td { (job.queue.as_deref().unwrap_or("–")) }
                        td { span class="badge" { (job.state.map_or("gone", JobState::as_str)) } }
                        td {
                            @for (at, prerequisite) in job.prerequisites.iter().enumerate() {
                                @if at > 0 { ", " }
                                (link(*prerequisite))
                            }
                        }
                    }
                }
            }
        }
        @if workflow.truncated {
            p class="muted" id="truncated" {
                "More jobs are connected than the " (workflow.jobs.len()) " listed: "
                a href=(config.href(&format!("/jobs/{id}/workflow?limit={MAX_WORKFLOW_LIMIT}"))) { "list up to " (MAX_WORKFLOW_LIMIT) }
                "."
            }
        }
    };
    Ok(page(
        &console,
        Some(&visitor),
        Nav::None,
        &format!("Workflow of job {id}"),
        body,
    ))
}
