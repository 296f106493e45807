//! `jobs check`: one line per threshold crossed and exit 1, or one line and exit 0.

use jobs_postgres::admin::{self, HealthThresholds};
use jobs_postgres::PgPool;

use super::{count, Outcome, Report};
use crate::error::CliError;

/// Reads the numbers and checks them against `thresholds`.
pub async fn run(pool: &PgPool, thresholds: &HealthThresholds) -> Result<Report, CliError> {
    let stats = admin::stats(pool).await?;
    let violations = admin::check(&stats, thresholds);
    if violations.is_empty() {
        let total = stats.total();
        let queues = stats.queues().len();
        return Ok(Report::success(format!(
            "ok: {} in {}; {} ready, {} running, {} dead\n",
            count(stats.kinds.len(), "kind"),
            count(queues, "queue"),
            total.ready,
            total.running,
            total.dead
        )));
    }
    let mut text = String::new();
    for violation in &violations {
        text.push_str(&crate::escape::shown(&violation.to_string()));
        text.push('\n');
    }
    Ok(Report {
        text,
        outcome: Outcome::Unhealthy,
    })
}
