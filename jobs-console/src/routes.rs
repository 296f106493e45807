//! Every route of the console, and the layers around them.

use axum::middleware::{from_fn, from_fn_with_state};
use axum::routing::{get, post};
use axum::Router;
use sqlx::PgPool;

use crate::actions;
use crate::config::ConsoleConfig;
use crate::html::style_sheet;
use crate::pages::{dead, job, jobs, login, outbox, overview, schedules, workers, workflow};
use crate::problem::{self, Problem};
use crate::schema_gate::require_schema;
use crate::security;
use crate::state::Console;

/// The console over `pool`: serve it, or nest it in an application's router (then give the
/// path it is nested under as [`ConsoleConfig::base_path`]). Serve it with
/// `into_make_service_with_connect_info::<SocketAddr>()` for the audit log to name peers'
/// addresses.
///
/// The pool is used for short statements only; two or three connections serve a console.
pub fn router(pool: PgPool, config: ConsoleConfig) -> Router {
    let console = Console::new(pool, config);
    let guarded = Router::new()
        .route("/", get(overview::show))
        .route("/jobs", get(jobs::show))
        .route("/jobs/{id}", get(job::show))
        .route("/jobs/{id}/workflow", get(workflow::show))
        .route("/jobs/run-now", post(actions::jobs::run_now))
        .route("/jobs/cancel", post(actions::cancel::cancel))
        .route("/dead", get(dead::show))
        .route("/dead/replay", post(actions::dead::replay))
        .route("/dead/discard", post(actions::dead::discard))
        .route("/queues/pause", post(actions::queues::pause))
        .route("/queues/resume", post(actions::queues::resume))
        .route("/schedules", get(schedules::show))
        .route("/schedules/trigger", post(actions::schedules::trigger))
        .route("/outbox", get(outbox::show))
        .route("/outbox/replay", post(actions::outbox::replay))
        .route("/workers", get(workers::show))
        .route("/logout", post(login::sign_out))
        .fallback(not_found)
        .layer(from_fn_with_state(console.clone(), require_schema))
        .layer(from_fn_with_state(console.clone(), security::guard));
    Router::new()
        .route("/login", get(login::form).post(login::sign_in))
        .route("/console.css", get(style_sheet))
        .merge(guarded)
        .layer(from_fn_with_state(console.clone(), problem::render))
        .layer(from_fn(security::headers))
        .with_state(console)
}

async fn not_found() -> Problem {
    Problem::NotFound("There is no such page".into())
}
