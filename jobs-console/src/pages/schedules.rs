//! Schedules: each one's expression and zone, its next ticks, last success and missed runs, with
//! the control to trigger one extra run now.

use std::time::Duration;

use axum::extract::{Query, State};
use axum::Extension;
use chrono::{DateTime, Utc};
use jobs_postgres::admin::{self, HealthThresholds, ScheduleStats};
use maud::{html, Markup};

use crate::html::{action_button, age, notice, page, Nav};
use crate::pages::Notice;
use crate::problem::Problem;
use crate::security::Visitor;
use crate::state::Console;

/// Upcoming ticks shown per schedule.
const NEXT_TICKS: usize = 3;

/// `GET /schedules`.
pub(crate) async fn show(
    State(console): State<Console>,
    Extension(visitor): Extension<Visitor>,
    Query(query): Query<Notice>,
) -> Result<Markup, Problem> {
    let stats = admin::stats(&console.pool).await?;
    let grace = HealthThresholds::default().schedule_grace;
    let body = html! {
        @if let Some(done) = &query.done { (notice(done)) }
        @if stats.schedules.is_empty() {
            p class="muted" { "No schedule is registered. Workers register the schedules their code declares when they start." }
        } @else {
            table id="schedules" {
                thead { tr {
                    th { "Name" } th { "Kind" } th { "Queue" } th { "When" } th { "Next ticks (UTC)" }
                    th { "Last success" } th class="num" { "Ticks since success" } th {}
                } }
                tbody {
                    @for schedule in &stats.schedules {
                        tr data-schedule=(schedule.name) {
                            td { (schedule.name) }
                            td { (schedule.kind) }
                            td { (schedule.queue) }
                            td { (schedule.description) br; span class="muted" { "missed ticks: " (schedule.missed) } }
                            td { (next_ticks(schedule)) }
                            td {
                                @match schedule.last_success_ago() {
                                    Some(ago) => { (age(Some(ago))) " ago" }
                                    None => span class="muted" { "never" },
                                }
                            }
                            td class="num" { (missed(schedule, grace)) }
                            td { (action_button(&console, &visitor, "/schedules/trigger", "Trigger now", &[("name", &schedule.name)])) }
                        }
                    }
                }
            }
            p class="muted" { "Triggering enqueues one extra run now; the regular ticks are untouched." }
        }
    };
    Ok(page(
        &console,
        Some(&visitor),
        Nav::Schedules,
        "Schedules",
        body,
    ))
}

fn next_ticks(schedule: &ScheduleStats) -> Markup {
    let Ok(parsed) = schedule.schedule() else {
        return html! { span class="bad" { "unreadable" } };
    };
    let mut ticks: Vec<DateTime<Utc>> = Vec::new();
    let mut after = schedule.checked_at;
    while ticks.len() < NEXT_TICKS {
        match parsed.next_tick_after(after) {
            Some(tick) => {
                ticks.push(tick);
                after = tick;
            }
            None => break,
        }
    }
    html! {
        @for tick in &ticks { (tick.format("%Y-%m-%d %H:%M:%S")) br; }
    }
}

fn missed(schedule: &ScheduleStats, grace: Duration) -> Markup {
    match schedule.ticks_since_success(grace) {
        Ok(count) if count >= admin::MISSING_AFTER_TICKS => html! { span class="bad" { (count) } },
        Ok(count) => html! { (count) },
        Err(_) => html! { "–" },
    }
}
