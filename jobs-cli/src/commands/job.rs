//! `jobs job run-now`: jobs by id.

use jobs_core::JobId;
use jobs_postgres::admin;
use jobs_postgres::PgPool;
use serde_json::json;

use super::job_refs::{by_kind, job_ref_json};
use super::{count, json_text, Report};

/// Makes the waiting jobs among `ids` due now; lists those that were not waiting.
pub async fn run_now(
    pool: &PgPool,
    ids: &[JobId],
    json: bool,
) -> Result<Report, crate::error::CliError> {
    let report = admin::run_now(pool, ids).await?;
    if json {
        return Ok(Report::success(json_text(&json!({
            "made_due": report.made_due.iter().map(job_ref_json).collect::<Vec<_>>(),
            "not_waiting": report.not_waiting,
        }))));
    }
    let mut text = if report.made_due.is_empty() {
        String::from("no job made due\n")
    } else {
        format!(
            "made {} due now: {}\n",
            count(report.made_due.len(), "job"),
            by_kind(&report.made_due)
        )
    };
    for id in &report.not_waiting {
        text.push_str(&format!(
            "job {id} is not waiting for a later time (due already, running, finished, dead or missing): nothing to do\n"
        ));
    }
    Ok(Report::success(text))
}
