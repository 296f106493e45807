//! Every page first checks that the database has the schema this console knows.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use jobs_postgres::SchemaStatus;
use sqlx::PgPool;

use crate::problem::Problem;
use crate::state::Console;

/// How long a schema found up to date is trusted before it is read again.
const TRUSTED_FOR: Duration = Duration::from_secs(5);

/// Remembers when the schema was last found up to date.
#[derive(Debug, Default)]
pub(crate) struct SchemaGate {
    up_to_date_at: Mutex<Option<Instant>>,
}

impl SchemaGate {
    /// Whether the schema is the one this console knows; read at most every [`TRUSTED_FOR`]
    /// while it is, at every request while it is not (so a page reloaded after `jobs migrate`
    /// works at once).
    pub(crate) async fn check(&self, pool: &PgPool) -> Result<(), Problem> {
        let fresh = self
            .up_to_date_at
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .is_some_and(|at| at.elapsed() < TRUSTED_FOR);
        if fresh {
            return Ok(());
        }
        match jobs_postgres::schema_status(pool).await? {
            SchemaStatus::UpToDate => {
                *self
                    .up_to_date_at
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner()) = Some(Instant::now());
                Ok(())
            }
            SchemaStatus::Missing => Err(Problem::SchemaMissing),
            SchemaStatus::Behind { applied, known } => {
                Err(Problem::SchemaBehind { applied, known })
            }
        }
    }
}

/// Answers with the schema's problem instead of the page, when there is one.
pub(crate) async fn require_schema(
    State(console): State<Console>,
    request: Request,
    next: Next,
) -> Response {
    match console.schema.check(&console.pool).await {
        Ok(()) => next.run(request).await,
        Err(problem) => problem.into_response(),
    }
}
