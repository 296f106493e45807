//! Workers and health: what `jobs check` would report with its default thresholds, and every
//! live worker process with its queues, kinds, the limits it enforces and when it was last seen.

use axum::extract::State;
use axum::Extension;
use jobs_postgres::admin::{self, HealthThresholds};
use maud::{html, Markup};

use crate::html::{age, page, Nav};
use crate::problem::Problem;
use crate::security::Visitor;
use crate::state::Console;

/// `GET /workers`.
pub(crate) async fn show(
    State(console): State<Console>,
    Extension(visitor): Extension<Visitor>,
) -> Result<Markup, Problem> {
    let stats = admin::stats(&console.pool).await?;
    let violations = admin::check(&stats, &HealthThresholds::default());
    let body = html! {
        h2 { "Health" }
        @if violations.is_empty() {
            p id="health" { span class="badge ok" { "healthy" } " Nothing crosses the default thresholds of " code { "jobs check" } "." }
        } @else {
            table id="health" {
                thead { tr { th { "Alert" } th { "What" } } }
                tbody {
                    @for violation in &violations {
                        tr { td { span class="badge bad" { (violation.name()) } } td { (violation.to_string()) } }
                    }
                }
            }
        }
        p class="muted" { "Thresholds: those of " code { "jobs check" } " without options; alert on them with " code { "jobs check" } " from cron or a probe." }
        h2 { "Live workers" }
        @if stats.workers.is_empty() {
            p class="muted" { "No worker process is running (none refreshed its record recently)." }
        } @else {
            table id="workers" {
                thead { tr {
                    th { "Host" } th class="num" { "Pid" } th { "Version" } th { "Queues (concurrency)" }
                    th { "Kinds" } th { "Limits" } th { "Started" } th { "Last seen" }
                } }
                tbody {
                    @for worker in &stats.workers {
                        tr data-worker=(worker.id) {
                            td { (worker.host) }
                            td class="num" { (worker.pid) }
                            td { (worker.version) }
                            td {
                                @for (index, queue) in worker.queues.iter().enumerate() {
                                    @if index > 0 { ", " }
                                    (queue.queue) " (" (queue.concurrency) ")"
                                }
                            }
                            td { (worker.kinds.join(", ")) }
                            td {
                                @for (index, limits) in worker.limits.iter().enumerate() {
                                    @if index > 0 { "; " }
                                    (limits.kind) ": " (limits.to_string())
                                }
                            }
                            td { (worker.started_at.format("%Y-%m-%d %H:%M:%S UTC")) }
                            td { (age(Some(worker.last_seen_ago))) " ago" }
                        }
                    }
                }
            }
        }
    };
    Ok(page(
        &console,
        Some(&visitor),
        Nav::Workers,
        "Workers and health",
        body,
    ))
}
