//! Jobs: a search over jobs of any state (id, kind, queue, state, dedupe key, enqueue time,
//! error text), newest first, a page at a time, with bulk cancel, replay and discard of the
//! selected jobs, or of every job the filter selects when the filter is one those actions take.

use axum::extract::{Query, State};
use axum::Extension;
use chrono::{DateTime, Utc};
use jobs_core::JobId;
use jobs_postgres::admin::{self, Cursor, JobFilter, JobPage, JobStatus, PageRequest};
use maud::{html, Markup};
use serde::Deserialize;

use crate::html::{csrf_field, notice, page, Nav};
use crate::pages::dead::shorten;
use crate::problem::Problem;
use crate::security::Visitor;
use crate::state::Console;
use crate::urls::percent_encode;

/// Jobs shown per page.
const PAGE_SIZE: usize = 50;

/// The search, as the form sends it: empty fields select everything.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct JobsQuery {
    #[serde(default)]
    id: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    queue: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    dedupe_key: String,
    /// Enqueued at or after (RFC 3339).
    #[serde(default)]
    since: String,
    /// Enqueued before (RFC 3339).
    #[serde(default)]
    until: String,
    #[serde(default)]
    error: String,
    #[serde(default)]
    after: String,
    done: Option<String>,
}

impl JobsQuery {
    /// The admin filter, or what is wrong with the form.
    fn filter(&self) -> Result<JobFilter, Problem> {
        let mut filter = JobFilter::all();
        if let Some(id) = given(&self.id) {
            let id: JobId = id
                .parse()
                .map_err(|_| Problem::BadRequest(format!("`{id}` is not a job id")))?;
            filter = filter.id(id);
        }
        if let Some(kind) = given(&self.kind) {
            filter = filter.kind(kind);
        }
        if let Some(queue) = given(&self.queue) {
            filter = filter.queue(queue);
        }
        if let Some(status) = self.status()? {
            filter = filter.status(status);
        }
        if let Some(key) = given(&self.dedupe_key) {
            filter = filter.dedupe_key(key);
        }
        if let Some(at) = given(&self.since) {
            filter = filter.created_since(moment("since", at)?);
        }
        if let Some(at) = given(&self.until) {
            filter = filter.created_until(moment("until", at)?);
        }
        if let Some(text) = given(&self.error) {
            filter = filter.error_text(text);
        }
        Ok(filter)
    }

    fn status(&self) -> Result<Option<JobStatus>, Problem> {
        given(&self.state)
            .map(|state| {
                state
                    .parse::<JobStatus>()
                    .map_err(|error| Problem::BadRequest(error.to_string()))
            })
            .transpose()
    }

    fn page(&self) -> Result<PageRequest, Problem> {
        Ok(match given(&self.after) {
            None => PageRequest::first(PAGE_SIZE),
            Some(after) => PageRequest::after(
                after
                    .parse::<Cursor>()
                    .map_err(|error| Problem::BadRequest(error.to_string()))?,
                PAGE_SIZE,
            ),
        })
    }

    /// Whether the filter is only kind, queue and state: one that cancel (ready, scheduled) or
    /// replay and discard (dead) can take whole.
    fn takes_whole(&self) -> bool {
        [
            &self.id,
            &self.dedupe_key,
            &self.since,
            &self.until,
            &self.error,
        ]
        .iter()
        .all(|field| given(field).is_none())
            && (given(&self.kind).is_some() || given(&self.queue).is_some())
    }

    /// The query string of this search without its page, for the next page's link.
    fn search_string(&self) -> String {
        [
            ("id", &self.id),
            ("kind", &self.kind),
            ("queue", &self.queue),
            ("state", &self.state),
            ("dedupe_key", &self.dedupe_key),
            ("since", &self.since),
            ("until", &self.until),
            ("error", &self.error),
        ]
        .iter()
        .filter(|(_, value)| given(value).is_some())
        .map(|(name, value)| format!("{name}={}", percent_encode(value.trim())))
        .collect::<Vec<_>>()
        .join("&")
    }
}

/// A form field's value, unless it is empty.
fn given(field: &str) -> Option<&str> {
    Some(field.trim()).filter(|field| !field.is_empty())
}

/// `text` as a time, or what is wrong with it.
fn moment(field: &str, text: &str) -> Result<DateTime<Utc>, Problem> {
    DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&Utc))
        .map_err(|_| {
            Problem::BadRequest(format!(
                "`{text}` ({field}) is not a time: write it as 2026-12-01T09:30:00Z"
            ))
        })
}

/// `GET /jobs`.
pub(crate) async fn show(
    State(console): State<Console>,
    Extension(visitor): Extension<Visitor>,
    Query(query): Query<JobsQuery>,
) -> Result<Markup, Problem> {
    let filter = query.filter()?;
    let found = admin::find_jobs(&console.pool, &filter, &query.page()?).await?;
    let body = html! {
        @if let Some(done) = &query.done { (notice(done)) }
        (search_form(&console, &query))
        (whole_filter_actions(&console, &visitor, &query)?)
        (results(&console, &visitor, &query, &found))
    };
    Ok(page(&console, Some(&visitor), Nav::Jobs, "Jobs", body))
}

fn search_form(console: &Console, query: &JobsQuery) -> Markup {
    html! {
        form class="filters" method="get" action=(console.config.href("/jobs")) id="search" {
            label { "Id" input type="text" name="id" value=(query.id) size="8"; }
            label { "Kind" input type="text" name="kind" value=(query.kind); }
            label { "Queue" input type="text" name="queue" value=(query.queue); }
            label { "State"
                select name="state" {
                    option value="" selected[given(&query.state).is_none()] { "any" }
                    @for status in JobStatus::ALL {
                        option value=(status.as_str()) selected[query.state.trim() == status.as_str()] { (status.as_str()) }
                    }
                }
            }
            label { "Dedupe key (with its kind)" input type="text" name="dedupe_key" value=(query.dedupe_key); }
            label { "Enqueued since" input type="text" name="since" value=(query.since) placeholder="2026-12-01T09:00:00Z"; }
            label { "until" input type="text" name="until" value=(query.until) placeholder="RFC 3339"; }
            label { "Error holds" input type="text" name="error" value=(query.error); }
            button type="submit" class="primary" { "Search" }
            a href=(console.config.href("/jobs")) { "Clear" }
        }
    }
}

/// The actions on every job the filter selects, when it is one they take: cancel for ready or
/// scheduled jobs, replay and discard for dead ones.
fn whole_filter_actions(
    console: &Console,
    visitor: &Visitor,
    query: &JobsQuery,
) -> Result<Markup, Problem> {
    if console.config.read_only || !query.takes_whole() {
        return Ok(html! {});
    }
    let hidden = html! {
        (csrf_field(visitor))
        input type="hidden" name="kind" value=(query.kind.trim());
        input type="hidden" name="queue" value=(query.queue.trim());
    };
    Ok(match query.status()? {
        Some(status @ (JobStatus::Ready | JobStatus::Scheduled)) => html! {
            div class="actions" {
                form method="post" action=(console.config.href("/jobs/cancel")) class="inline" {
                    (hidden)
                    input type="hidden" name="state" value=(status.as_str());
                    button type="submit" class="danger" id="cancel-all" { "Cancel every " (status.as_str()) " job of this filter…" }
                }
            }
        },
        Some(JobStatus::Dead) => html! {
            div class="actions" {
                form method="post" action=(console.config.href("/dead/replay")) class="inline" {
                    (hidden)
                    button type="submit" id="replay-all" { "Replay every dead job of this filter…" }
                }
                form method="post" action=(console.config.href("/dead/discard")) class="inline" {
                    (hidden)
                    button type="submit" class="danger" id="discard-all" { "Discard every dead job of this filter…" }
                }
            }
        },
        _ => html! {},
    })
}

fn results(console: &Console, visitor: &Visitor, query: &JobsQuery, found: &JobPage) -> Markup {
    let config = &console.config;
    let writable = !config.read_only;
    html! {
        @if found.jobs.is_empty() {
            p class="muted" id="no-jobs" {
                @if found.examination_bounded { "No job matches among the 10,000 examined so far." }
                @else { "No job matches." }
            }
        } @else {
            form method="post" action=(config.href("/jobs/cancel")) id="selection" {
                (csrf_field(visitor))
                input type="hidden" name="selected" value="true";
                table id="jobs" {
                    thead { tr {
                        @if writable { th {} }
                        th class="num" { "Id" } th { "Kind" } th { "Queue" } th { "State" }
                        th class="num" { "Attempts" } th { "Enqueued" } th { "Due" } th { "Dedupe key" } th { "Last error" }
                    } }
                    tbody {
                        @for job in &found.jobs {
                            tr data-id=(job.id) {
                                @if writable { td { input type="checkbox" name="id" value=(job.id) aria-label=(format!("select job {}", job.id)); } }
                                td class="num" { a href=(config.href(&format!("/jobs/{}", job.id))) { (job.id) } }
                                td { a href=(config.href(&format!("/jobs?kind={}", percent_encode(&job.kind)))) { (job.kind) } }
                                td { a href=(config.href(&format!("/jobs?queue={}", percent_encode(&job.queue)))) { (job.queue) } }
                                td { span class="badge" { (job.status.as_str()) } }
                                td class="num" { (job.attempts) "/" (job.max_attempts) }
                                td { (job.created_at.format("%Y-%m-%d %H:%M:%S")) }
                                td { (job.run_at.format("%Y-%m-%d %H:%M:%S")) }
                                td { @if let Some(key) = &job.dedupe_key { code { (key) } } }
                                td { @if let Some(error) = &job.last_error { (shorten(&error.error)) } }
                            }
                        }
                    }
                }
                @if writable {
                    div class="actions" {
                        button type="submit" class="danger" id="cancel-selected" { "Cancel selected…" }
                        button type="submit" id="replay-selected" formaction=(config.href("/dead/replay")) { "Replay selected (dead)…" }
                        button type="submit" class="danger" id="discard-selected" formaction=(config.href("/dead/discard")) { "Discard selected (dead)…" }
                    }
                }
            }
        }
        @if let Some(next) = found.next {
            p class="pager" {
                @if found.examination_bounded { span class="muted" { "10,000 jobs examined; more may match. " } }
                a href=(config.href(&format!("/jobs?{}&after={next}", query.search_string()))) id="next-page" { "Next page" }
            }
        }
    }
}
