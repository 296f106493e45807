//! Reading a job's output, with what says whether it is there to read.

use jobs_core::JobId;
use sqlx::PgPool;

/// The kind, state and output (as JSON text, NULL when none was stored) of job `$1`; no row
/// when there is no such job.
pub const READ_OUTPUT: &str = "
SELECT kind, state, output::text AS output FROM jobs_queue WHERE id = $1";

/// A job's output, as [`READ_OUTPUT`] returns it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct StoredOutput {
    /// The job's kind.
    pub kind: String,
    /// Its state.
    pub state: String,
    /// Its output as JSON text: NULL unless it is done with an output.
    pub output: Option<String>,
}

/// The kind, state and output of job `id`; `None` when there is no such job.
pub(crate) async fn read_output(
    pool: &PgPool,
    id: JobId,
) -> Result<Option<StoredOutput>, sqlx::Error> {
    sqlx::query_as(READ_OUTPUT)
        .bind(id)
        .fetch_optional(pool)
        .await
}
