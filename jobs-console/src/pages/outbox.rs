//! The outbox: unpublished rows and the oldest one's age, and the parked rows (events that could
//! not be published) with the control to replay them.

use axum::extract::{Query, State};
use axum::Extension;
use jobs_postgres::admin;
use maud::{html, Markup};

use crate::html::{action_button, age, notice, page, payload, Nav};
use crate::pages::Notice;
use crate::problem::Problem;
use crate::security::Visitor;
use crate::state::Console;

/// Parked rows shown.
const SHOWN: usize = 100;

/// `GET /outbox`.
pub(crate) async fn show(
    State(console): State<Console>,
    Extension(visitor): Extension<Visitor>,
    Query(query): Query<Notice>,
) -> Result<Markup, Problem> {
    let stats = admin::stats(&console.pool).await?;
    let parked = admin::list_parked(&console.pool, None, 0, SHOWN).await?;
    let body = html! {
        @if let Some(done) = &query.done { (notice(done)) }
        p {
            (stats.outbox.unpublished) " unpublished"
            @if let Some(oldest) = stats.outbox.oldest_unpublished_age { ", the oldest written " (age(Some(oldest))) " ago" }
            " · " (stats.outbox.parked) " parked"
        }
        @if parked.is_empty() {
            p class="muted" { "No parked row." }
        } @else {
            div class="actions" {
                (action_button(&console, &visitor, "/outbox/replay", "Replay every parked row…", &[]))
            }
            table id="parked" {
                thead { tr {
                    th class="num" { "Id" } th { "Topic" } th class="num" { "Attempts" } th { "Parked for" }
                    th { "Last error" } th { "Message" } th {}
                } }
                tbody {
                    @for row in &parked {
                        tr {
                            td class="num" { (row.id) }
                            td { (row.topic) }
                            td class="num" { (row.attempts) }
                            td { (age(Some(row.parked_for))) }
                            td { (row.last_error.as_deref().unwrap_or("")) }
                            td { (payload(&console, &row.payload)) }
                            td { (action_button(&console, &visitor, "/outbox/replay", "Replay", &[("id", &row.id.to_string())])) }
                        }
                    }
                }
            }
            @if parked.len() == SHOWN { p class="muted" { "The first " (SHOWN) " parked rows are shown." } }
        }
    };
    Ok(page(&console, Some(&visitor), Nav::Outbox, "Outbox", body))
}
