//! Triggering a schedule now.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use jobs_postgres::admin::{self, Trigger};
use serde::Deserialize;

use super::done;
use crate::audit;
use crate::forms::CheckedForm;
use crate::problem::Problem;
use crate::state::Console;

/// The schedule.
#[derive(Debug, Deserialize)]
pub(crate) struct ScheduleAction {
    name: String,
}

/// `POST /schedules/trigger`: enqueues one extra run of a schedule now.
pub(crate) async fn trigger(
    State(console): State<Console>,
    form: CheckedForm<ScheduleAction>,
) -> Result<Response, Problem> {
    let CheckedForm { visitor, fields } = form;
    let what = match admin::trigger_schedule(&console.pool, &fields.name).await? {
        Trigger::Enqueued { id } => {
            format!("Triggered schedule {}: job {id} enqueued", fields.name)
        }
        Trigger::NotFound => {
            return Err(Problem::NotFound(format!(
                "There is no schedule named {}",
                fields.name
            )))
        }
        Trigger::SettingsUnknown => {
            return Err(Problem::BadRequest(format!(
                "Schedule {} was registered by an older version that did not record its jobs' \
                 settings: start a worker of this version, then trigger again",
                fields.name
            )))
        }
    };
    audit::record(&visitor.actor, "trigger schedule", &fields.name, &what);
    Ok(done(&console, "/schedules", &what).into_response())
}
