//! `jobs migrate`.

use jobs_postgres::PgPool;

use super::Report;
use crate::error::CliError;

/// Applies the embedded migrations not yet applied.
pub async fn run(pool: &PgPool) -> Result<Report, CliError> {
    let report = jobs_postgres::migrate(pool).await?;
    let text = if report.applied.is_empty() {
        "the jobs schema is up to date\n".to_owned()
    } else {
        let versions: Vec<String> = report.applied.iter().map(ToString::to_string).collect();
        format!("applied jobs migrations {}\n", versions.join(", "))
    };
    Ok(Report::success(text))
}
