//! Replaying parked outbox rows.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use jobs_postgres::admin;
use jobs_postgres::outbox::OutboxId;
use serde::Deserialize;

use super::done;
use crate::audit;
use crate::forms::CheckedForm;
use crate::problem::Problem;
use crate::state::Console;

/// The parked rows to replay: those given, or every one.
#[derive(Debug, Deserialize)]
pub(crate) struct ReplayParked {
    #[serde(default)]
    id: Vec<OutboxId>,
}

/// `POST /outbox/replay`.
pub(crate) async fn replay(
    State(console): State<Console>,
    form: CheckedForm<ReplayParked>,
) -> Result<Response, Problem> {
    let CheckedForm { visitor, fields } = form;
    let ids = (!fields.id.is_empty()).then_some(fields.id.as_slice());
    let replayed = admin::replay_parked(&console.pool, ids).await?;
    let target = match ids {
        Some(ids) => format!("{ids:?}"),
        None => "every parked row".to_owned(),
    };
    let what = format!("Replayed {} parked row(s)", replayed.len());
    audit::record(&visitor.actor, "replay parked outbox rows", &target, &what);
    Ok(done(&console, "/outbox", &what).into_response())
}
