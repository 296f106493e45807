//! The overview: per queue, its jobs by state, the oldest ready job's age and whether it is
//! paused (with the control to pause or resume it); per kind, the same numbers; each limit the
//! live workers enforce, with how much of it is in use; the outbox's numbers.

use axum::extract::{Query, State};
use axum::Extension;
use std::time::Duration;

use chrono::{DateTime, Utc};
use jobs_postgres::admin::{
    self, Counts, LimitStats, QueuePause, RetainedCounts, Stats, ThroughputPoint,
};
use maud::{html, Markup};
use serde::Deserialize;

use crate::chart::{minute_bars, MinuteCounts};
use crate::html::{action_button, age, notice, page_with_head, Nav};
use crate::problem::Problem;
use crate::security::Visitor;
use crate::state::Console;
use crate::urls::percent_encode;

/// Minutes each queue's throughput chart shows.
const CHART_MINUTES: usize = 60;

/// The window of throughput read for the charts.
const CHART_WINDOW: Duration = Duration::from_secs(CHART_MINUTES as u64 * 60);

/// The overview's query: an optional refresh period and a notice after an action.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct OverviewQuery {
    /// Reload the page every this many seconds (2 to 300).
    refresh: Option<u32>,
    /// What the last action did.
    done: Option<String>,
}

/// `GET /`.
pub(crate) async fn show(
    State(console): State<Console>,
    Extension(visitor): Extension<Visitor>,
    Query(query): Query<OverviewQuery>,
) -> Result<Markup, Problem> {
    let stats = admin::stats(&console.pool).await?;
    let throughput = admin::throughput(&console.pool, CHART_WINDOW).await?;
    let now = Utc::now();
    let refresh = query.refresh.map(|seconds| seconds.clamp(2, 300));
    let head = html! {
        @if let Some(seconds) = refresh { meta http-equiv="refresh" content=(seconds); }
    };
    let body = html! {
        @if let Some(done) = &query.done { (notice(done)) }
        p class="muted" {
            @if let Some(seconds) = refresh {
                "Refreshing every " (seconds) " s · "
                a href=(console.config.href("/")) { "stop refreshing" }
            } @else {
                a href=(console.config.href("/?refresh=5")) { "Refresh every 5 s" }
            }
        }
        h2 { "Queues" }
        (queues_table(&console, &visitor, &stats, &throughput, now))
        p class="muted" {
            (stats.workers.len()) " live worker" @if stats.workers.len() != 1 { "s" } " · "
            a href=(console.config.href("/workers")) { "workers and health" }
        }
        h2 { "Kinds" }
        (kinds_table(&console, &stats))
        @if !stats.limits.is_empty() {
            h2 { "Limits" }
            (limits_table(&stats.limits))
        }
        h2 { "Retained" }
        (retained(&stats))
        h2 { "Outbox" }
        p {
            (stats.outbox.unpublished) " unpublished"
            @if let Some(oldest) = stats.outbox.oldest_unpublished_age { " (oldest " (age(Some(oldest))) ")" }
            " · "
            a href=(console.config.href("/outbox")) { (stats.outbox.parked) " parked" }
        }
    };
    Ok(page_with_head(
        &console,
        Some(&visitor),
        Nav::Overview,
        "Overview",
        head,
        body,
    ))
}

/// One row per queue, with its pause and the control to change it; a paused queue with no jobs
/// has a row too.
fn queues_table(
    console: &Console,
    visitor: &Visitor,
    stats: &Stats,
    throughput: &[ThroughputPoint],
    now: DateTime<Utc>,
) -> Markup {
    // Every queue with jobs, and those without any now that are paused, served by a live
    // worker, or ended runs in the last hour.
    let mut queues = stats.queues();
    let known = stats
        .paused
        .iter()
        .map(|pause| pause.queue.as_str())
        .chain(
            stats
                .workers
                .iter()
                .flat_map(|worker| worker.queues.iter().map(|queue| queue.queue.as_str())),
        )
        .chain(throughput.iter().map(|point| point.queue.as_str()));
    for queue in known {
        if !queues.iter().any(|(listed, _)| listed == queue) {
            queues.push((queue.to_owned(), Counts::default()));
        }
    }
    queues.sort_by(|(a, _), (b, _)| a.cmp(b));
    html! {
        @if queues.is_empty() {
            p class="muted" { "No jobs yet." }
        } @else {
            table id="queues" {
                thead { tr {
                    th { "Queue" } th class="num" { "Ready" } th class="num" { "Scheduled" }
                    th class="num" { "Waiting" } th class="num" { "Running" } th class="num" { "Expired leases" }
                    th class="num" { "Dead" } th { "Oldest ready" } th { "State" }
                    th { "Ended per minute, last hour" } th {}
                } }
                tbody {
                    @for (queue, counts) in &queues {
                        @let pause = stats.paused.iter().find(|pause| pause.queue == *queue);
                        tr data-queue=(queue) {
                            td { (queue) }
                            td class="num" { (counts.ready) }
                            td class="num" { (counts.scheduled) }
                            td class="num" { (counts.waiting) }
                            td class="num" { (counts.running) }
                            td class="num" { (counts.expired_leases) }
                            td class="num" {
                                @if counts.dead > 0 {
                                    a class="bad" href=(console.config.href(&format!("/dead?queue={}", percent_encode(queue)))) { (counts.dead) }
                                } @else { "0" }
                            }
                            td { (age(counts.oldest_ready_age)) }
                            td { (pause_state(pause)) }
                            td { (chart_of(throughput, queue, now)) }
                            td {
                                @if pause.is_some() {
                                    (action_button(console, visitor, "/queues/resume", "Resume", &[("queue", queue)]))
                                } @else {
                                    (action_button(console, visitor, "/queues/pause", "Pause", &[("queue", queue)]))
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The throughput chart of `queue`.
fn chart_of(throughput: &[ThroughputPoint], queue: &str, now: DateTime<Utc>) -> Markup {
    let points = throughput
        .iter()
        .filter(|point| point.queue == queue)
        .map(|point| {
            (
                point.minute,
                MinuteCounts {
                    done: point.done,
                    retried: point.retried,
                    dead: point.dead,
                    cancelled: point.cancelled,
                },
            )
        });
    minute_bars(points, CHART_MINUTES, now)
}

fn pause_state(pause: Option<&QueuePause>) -> Markup {
    match pause {
        None => html! { span class="badge ok" { "running" } },
        Some(pause) => html! {
            span class="badge warn" title=(pause.reason.as_deref().unwrap_or("")) {
                "paused " (age(Some(pause.paused_for))) " by " (pause.paused_by)
            }
        },
    }
}

fn kinds_table(console: &Console, stats: &Stats) -> Markup {
    html! {
        @if !stats.kinds.is_empty() {
            table id="kinds" {
                thead { tr {
                    th { "Kind" } th { "Queue" } th class="num" { "Ready" }
                    th class="num" { "Scheduled" } th class="num" { "Waiting" }
                    th class="num" { "Running" }
                    th class="num" { "Dead" } th { "Oldest ready" }
                } }
                tbody {
                    @for kind in &stats.kinds {
                        tr {
                            td { (kind.kind) }
                            td { (kind.queue) }
                            td class="num" { (kind.counts.ready) }
                            td class="num" { (kind.counts.scheduled) }
                            td class="num" { (kind.counts.waiting) }
                            td class="num" { (kind.counts.running) }
                            td class="num" {
                                @if kind.counts.dead > 0 {
                                    a class="bad" href=(console.config.href(&format!("/dead?kind={}", percent_encode(&kind.kind)))) { (kind.counts.dead) }
                                } @else { "0" }
                            }
                            td { (age(kind.counts.oldest_ready_age)) }
                        }
                    }
                }
            }
        }
    }
}

/// One row per limited kind: its limits as the live workers declare them, how much of each is
/// in use, and the due jobs they hold back.
fn limits_table(limits: &[LimitStats]) -> Markup {
    html! {
        table id="limits" {
            thead { tr {
                th { "Kind" } th { "Limits" } th class="num" { "Running" }
                th class="num" { "Started in the window" } th class="num" { "Keys at their limit" }
                th class="num" { "Held back" }
            } }
            tbody {
                @for limit in limits {
                    tr data-kind=(limit.limits.kind) {
                        td { (limit.limits.kind) }
                        td {
                            (limit.limits.to_string())
                            @if limit.workers_disagree {
                                " " span class="badge bad" title="Live workers declare different limits for this kind, or one runs it without: each enforces its own." { "workers disagree" }
                            }
                        }
                        td class="num" {
                            (limit.running)
                            @if let Some(max) = limit.limits.max_running { " of " (max) }
                        }
                        td class="num" {
                            @if let Some(rate) = limit.limits.rate_limit {
                                (limit.started_in_window) " of " (rate.to_string())
                            } @else { "-" }
                        }
                        td class="num" {
                            @if limit.limits.max_running_per_key.is_some() || limit.limits.rate_limit_per_key.is_some() {
                                (limit.keys_at_limit)
                            } @else { "-" }
                        }
                        td class="num" {
                            @if limit.held_back > 0 {
                                span class="bad" { (limit.held_back) }
                            } @else { "0" }
                        }
                    }
                }
            }
        }
        p class="muted" { "Due jobs a limit holds back wait ready, with no attempt spent, and start as soon as it lets them." }
    }
}

fn retained(stats: &Stats) -> Markup {
    let total = stats.total();
    html! {
        p {
            @match stats.retained {
                RetainedCounts::Counted => { (total.done) " done · " (total.cancelled) " cancelled" }
                RetainedCounts::Estimated => { "about " (total.done) " done · about " (total.cancelled) " cancelled (estimated)" }
                RetainedCounts::Unknown => { "Done and cancelled: many, not counted (the table has not been analyzed yet)." }
            }
        }
    }
}
