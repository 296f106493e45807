//! Replaying parked outbox rows: one from its row, or every parked row after a preview with the
//! count.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use jobs_postgres::admin;
use jobs_postgres::outbox::OutboxId;
use maud::html;
use serde::Deserialize;

use super::done;
use crate::audit;
use crate::forms::CheckedForm;
use crate::html::{csrf_field, page, Nav};
use crate::problem::Problem;
use crate::security::Visitor;
use crate::state::Console;

/// The parked rows to replay: those given, or every one.
#[derive(Debug, Deserialize)]
pub(crate) struct ReplayParked {
    #[serde(default)]
    id: Vec<OutboxId>,
    /// `yes` once the preview of a replay of every parked row was confirmed.
    confirm: Option<String>,
}

/// `POST /outbox/replay`.
pub(crate) async fn replay(
    State(console): State<Console>,
    form: CheckedForm<ReplayParked>,
) -> Result<Response, Problem> {
    let CheckedForm { visitor, fields } = form;
    let ids = (!fields.id.is_empty()).then_some(fields.id.as_slice());
    if ids.is_none() && fields.confirm.as_deref() != Some("yes") {
        let parked = admin::preview_replay_parked(&console.pool, None).await?;
        return Ok(confirm_page(&console, &visitor, parked.len()));
    }
    let replayed = admin::replay_parked(&console.pool, ids).await?;
    let target = match ids {
        Some(ids) => format!("{ids:?}"),
        None => "every parked row".to_owned(),
    };
    let what = format!("Replayed {} parked row(s)", replayed.len());
    audit::record(&visitor.actor, "replay parked outbox rows", &target, &what);
    Ok(done(&console, "/outbox", &what).into_response())
}

/// What a replay of every parked row would do, and the form that confirms it.
fn confirm_page(console: &Console, visitor: &Visitor, parked: usize) -> Response {
    let body = html! {
        p id="preview-count" {
            strong { "Replay " (parked) " parked row(s)" }
            ": each is pending again at once, its attempts reset and its last error kept; the relay publishes it before the later rows of its topic."
        }
        @if parked == 0 {
            p class="muted" { "Nothing to do: no row is parked (any more)." }
        } @else {
            form method="post" action=(console.config.href("/outbox/replay")) class="actions" {
                (csrf_field(visitor))
                input type="hidden" name="confirm" value="yes";
                button type="submit" id="confirm" class="primary" { "Replay " (parked) " parked row(s)" }
                a href=(console.config.href("/outbox")) { "Back" }
            }
        }
    };
    page(
        console,
        Some(visitor),
        Nav::Outbox,
        "Replay parked rows?",
        body,
    )
    .into_response()
}
