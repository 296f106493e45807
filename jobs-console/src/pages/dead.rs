//! Dead letters: the dead jobs a filter selects, a page at a time, with their last error, and the
//! controls to replay or discard the selected ones or every one the filter selects.

use axum::extract::{Query, State};
use axum::Extension;
use jobs_core::JobId;
use jobs_postgres::admin::{self, DeadFilter};
use maud::{html, Markup};
use serde::Deserialize;

use crate::html::{age, csrf_field, notice, page, Nav};
use crate::problem::Problem;
use crate::security::Visitor;
use crate::state::Console;
use crate::urls::percent_encode;

/// Dead jobs shown per page.
pub(crate) const PAGE_SIZE: usize = 50;

/// The dead letters' filter and page.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct DeadQuery {
    /// Only this kind.
    #[serde(default)]
    pub(crate) kind: String,
    /// Only this queue.
    #[serde(default)]
    pub(crate) queue: String,
    /// Ids above this one.
    pub(crate) after: Option<JobId>,
    /// What the last action did.
    pub(crate) done: Option<String>,
}

impl DeadQuery {
    /// The admin filter this query selects (empty fields select everything).
    pub(crate) fn filter(&self) -> DeadFilter {
        dead_filter(&self.kind, &self.queue)
    }
}

/// The dead jobs of `kind` in `queue`, an empty (or blank) one selecting any: the filter the
/// dead-letter page and its actions share.
pub(crate) fn dead_filter(kind: &str, queue: &str) -> DeadFilter {
    let mut filter = DeadFilter::all();
    if !kind.trim().is_empty() {
        filter = filter.kind(kind.trim());
    }
    if !queue.trim().is_empty() {
        filter = filter.queue(queue.trim());
    }
    filter
}

/// `GET /dead`.
pub(crate) async fn show(
    State(console): State<Console>,
    Extension(visitor): Extension<Visitor>,
    Query(query): Query<DeadQuery>,
) -> Result<Markup, Problem> {
    let filter = query.filter();
    let total = admin::count_dead(&console.pool, &filter).await?;
    let jobs =
        admin::list_dead(&console.pool, &filter, query.after.unwrap_or(0), PAGE_SIZE).await?;
    let config = &console.config;
    let writable = !config.read_only;
    let filter_query = format!(
        "kind={}&queue={}",
        percent_encode(query.kind.trim()),
        percent_encode(query.queue.trim())
    );
    let body = html! {
        @if let Some(done) = &query.done { (notice(done)) }
        form class="filters" method="get" action=(config.href("/dead")) {
            label { "Kind" input type="text" name="kind" value=(query.kind); }
            label { "Queue" input type="text" name="queue" value=(query.queue); }
            button type="submit" { "Filter" }
        }
        p id="dead-count" { (total) " dead job" @if total != 1 { "s" } " selected by this filter." }
        @if writable && total > 0 {
            div class="actions" {
                form method="post" action=(config.href("/dead/replay")) class="inline" {
                    (csrf_field(&visitor))
                    input type="hidden" name="kind" value=(query.kind.trim());
                    input type="hidden" name="queue" value=(query.queue.trim());
                    button type="submit" id="replay-all" { "Replay all " (total) "…" }
                }
                form method="post" action=(config.href("/dead/discard")) class="inline" {
                    (csrf_field(&visitor))
                    input type="hidden" name="kind" value=(query.kind.trim());
                    input type="hidden" name="queue" value=(query.queue.trim());
                    button type="submit" class="danger" id="discard-all" { "Discard all " (total) "…" }
                }
            }
        }
        @if jobs.is_empty() {
            p class="muted" { "No dead jobs here." }
        } @else {
            form method="post" action=(config.href("/dead/replay")) id="selection" {
                (csrf_field(&visitor))
                input type="hidden" name="selected" value="true";
                table id="dead" {
                    thead { tr {
                        @if writable { th {} }
                        th class="num" { "Id" } th { "Kind" } th { "Queue" } th class="num" { "Attempts" }
                        th { "Dead for" } th { "Last error" }
                    } }
                    tbody {
                        @for job in &jobs {
                            tr data-id=(job.id) {
                                @if writable { td { input type="checkbox" name="id" value=(job.id) aria-label=(format!("select job {}", job.id)); } }
                                td class="num" { a href=(config.href(&format!("/jobs/{}", job.id))) { (job.id) } }
                                td { (job.kind) }
                                td { (job.queue) }
                                td class="num" { (job.attempts) "/" (job.max_attempts) }
                                td { (age(Some(job.dead_for))) }
                                td {
                                    @if let Some(error) = &job.last_error {
                                        span class="muted" { (error.kind) ": " } (shorten(&error.error))
                                    }
                                }
                            }
                        }
                    }
                }
                @if writable {
                    div class="actions" {
                        button type="submit" id="replay-selected" { "Replay selected…" }
                        button type="submit" class="danger" id="discard-selected" formaction=(config.href("/dead/discard")) { "Discard selected…" }
                    }
                }
            }
            @if jobs.len() == PAGE_SIZE {
                @if let Some(last) = jobs.last() {
                    p class="pager" { a href=(config.href(&format!("/dead?{filter_query}&after={}", last.id))) { "Next page" } }
                }
            }
        }
    };
    Ok(page(
        &console,
        Some(&visitor),
        Nav::Dead,
        "Dead letters",
        body,
    ))
}

/// The first 200 characters of an error, for a table cell.
pub(crate) fn shorten(text: &str) -> String {
    const SHOWN: usize = 200;
    match text.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}
