//! What went wrong, as a page a person can act on.
//!
//! A handler returns a [`Problem`]; its response carries the problem, and [`render`] (a layer
//! over every route) turns it into a full page with the console's navigation.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use jobs_postgres::admin::AdminError;
use jobs_postgres::MigrateError;
use maud::html;

use crate::html::{page, Nav};
use crate::security::Visitor;
use crate::state::Console;

/// Why a page could not be shown or an action not done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Problem {
    /// The database could not be reached.
    Unreachable(String),
    /// The database has no jobs schema.
    SchemaMissing,
    /// The database's schema lacks migrations this console needs.
    SchemaBehind {
        /// The newest migration applied.
        applied: i32,
        /// The newest migration this console knows.
        known: i32,
    },
    /// The database's schema is newer than this console.
    SchemaNewer {
        /// The newest migration applied.
        found: i32,
        /// The newest migration this console knows.
        known: i32,
    },
    /// The migration history does not match this console's migrations.
    SchemaMismatch(String),
    /// No such thing.
    NotFound(String),
    /// The request is malformed.
    BadRequest(String),
    /// The request is not allowed.
    Forbidden(String),
    /// The console needs its access token.
    SignInRequired,
    /// The database refused a statement.
    Internal(String),
}

impl Problem {
    fn status(&self) -> StatusCode {
        match self {
            Problem::Unreachable(_)
            | Problem::SchemaMissing
            | Problem::SchemaBehind { .. }
            | Problem::SchemaNewer { .. }
            | Problem::SchemaMismatch(_) => StatusCode::SERVICE_UNAVAILABLE,
            Problem::NotFound(_) => StatusCode::NOT_FOUND,
            Problem::BadRequest(_) => StatusCode::BAD_REQUEST,
            Problem::Forbidden(_) => StatusCode::FORBIDDEN,
            Problem::SignInRequired => StatusCode::UNAUTHORIZED,
            Problem::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The page's title, and what happened and what to do, as paragraphs.
    fn explain(&self) -> (&'static str, Vec<String>) {
        match self {
            Problem::Unreachable(detail) => (
                "The database cannot be reached",
                vec![
                    format!("The console could not reach PostgreSQL: {detail}."),
                    "Check that the server is running and accepts connections from this host, \
                     and that the URL the console was started with (DATABASE_URL) is right; \
                     then reload this page."
                        .to_owned(),
                ],
            ),
            Problem::SchemaMissing => (
                "The jobs schema is missing",
                vec![
                    "This database has no jobs tables yet.".to_owned(),
                    "Run `jobs migrate` (or call `jobs::migrate` from your application) against \
                     it, or check that the console points at the right database; then reload."
                        .to_owned(),
                ],
            ),
            Problem::SchemaBehind { applied, known } => (
                "The jobs schema is behind this console",
                vec![
                    format!("The database has jobs migrations up to {applied}; this console needs {known}."),
                    "Run `jobs migrate` with this version (workers of this version also migrate \
                     when they start); then reload."
                        .to_owned(),
                ],
            ),
            Problem::SchemaNewer { found, known } => (
                "The jobs schema is newer than this console",
                vec![
                    format!("The database has jobs migration {found}; this console knows up to {known}."),
                    "Upgrade the console (the `jobs` tool or the application serving it) to the \
                     version your workers run."
                        .to_owned(),
                ],
            ),
            Problem::SchemaMismatch(detail) => (
                "The jobs schema does not match this console",
                vec![
                    format!("{detail}."),
                    "Use the console of the same version as the workers that migrated this \
                     database."
                        .to_owned(),
                ],
            ),
            Problem::NotFound(what) => ("Not found", vec![format!("{what}.")]),
            Problem::BadRequest(why) => (
                "The request cannot be done",
                vec![format!("{why}."), "Go back, correct it and try again.".to_owned()],
            ),
            Problem::Forbidden(why) => ("Not allowed", vec![format!("{why}.")]),
            Problem::SignInRequired => (
                "Sign in",
                vec!["This console needs its access token.".to_owned()],
            ),
            Problem::Internal(detail) => (
                "The database refused the request",
                vec![
                    format!("{detail}."),
                    "Nothing was changed by the statement that failed. Reload to try again."
                        .to_owned(),
                ],
            ),
        }
    }
}

impl From<sqlx::Error> for Problem {
    fn from(error: sqlx::Error) -> Self {
        match error {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => Problem::Unreachable(error.to_string()),
            other => Problem::Internal(other.to_string()),
        }
    }
}

impl From<AdminError> for Problem {
    fn from(error: AdminError) -> Self {
        match error {
            AdminError::SchemaMissing(_) => Problem::SchemaMissing,
            AdminError::Database(error) => error.into(),
            invalid @ (AdminError::InvalidQueue(_)
            | AdminError::InvalidKind(_)
            | AdminError::InvalidText { .. }
            | AdminError::EmptyFilter
            | AdminError::InvalidFilter { .. }
            | AdminError::InvalidWindow(_)) => Problem::BadRequest(invalid.to_string()),
            other => Problem::Internal(other.to_string()),
        }
    }
}

impl From<MigrateError> for Problem {
    fn from(error: MigrateError) -> Self {
        match error {
            MigrateError::Database(error) => error.into(),
            MigrateError::NewerSchema { found, known } => Problem::SchemaNewer { found, known },
            other => Problem::SchemaMismatch(other.to_string()),
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let mut response = self.status().into_response();
        response.extensions_mut().insert(self);
        response
    }
}

/// Turns a response carrying a [`Problem`] into its page.
pub(crate) async fn render(
    State(console): State<Console>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = next.run(request).await;
    let visitor = response.extensions().get::<Visitor>().cloned();
    let Some(problem) = response.extensions_mut().remove::<Problem>() else {
        return response;
    };
    let (title, paragraphs) = problem.explain();
    let body = html! {
        div class="problem" {
            @for paragraph in &paragraphs { p { (paragraph) } }
            @if problem == Problem::SignInRequired {
                p { a href=(console.config.href("/login")) { "Sign in" } }
            } @else {
                p { a href=(console.config.href("/")) { "Back to the overview" } }
            }
        }
    };
    let status = response.status();
    (
        status,
        page(&console, visitor.as_ref(), Nav::None, title, body),
    )
        .into_response()
}
