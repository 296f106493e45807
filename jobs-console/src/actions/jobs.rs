//! Actions on one job by id: run it now.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use jobs_core::JobId;
use jobs_postgres::admin;
use serde::Deserialize;

use super::done;
use crate::audit;
use crate::forms::CheckedForm;
use crate::problem::Problem;
use crate::state::Console;

/// The job.
#[derive(Debug, Deserialize)]
pub(crate) struct OneJob {
    id: JobId,
}

/// `POST /jobs/run-now`: makes a job waiting for a later time due now.
pub(crate) async fn run_now(
    State(console): State<Console>,
    form: CheckedForm<OneJob>,
) -> Result<Response, Problem> {
    let CheckedForm { visitor, fields } = form;
    let report = admin::run_now(&console.pool, &[fields.id]).await?;
    let what = if report.made_due.is_empty() {
        format!(
            "Job {} was not waiting for a later time: nothing changed",
            fields.id
        )
    } else {
        format!("Job {} is due now", fields.id)
    };
    audit::record(&visitor.actor, "run job now", &fields.id.to_string(), &what);
    Ok(done(&console, &format!("/jobs/{}", fields.id), &what).into_response())
}
