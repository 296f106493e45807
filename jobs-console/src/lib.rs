//! The web console of a jobs queue on PostgreSQL.
//!
//! Pages: the overview (per queue: ready, running, scheduled, dead, the oldest ready job's age,
//! pauses), one job (payload, every attempt's error, timestamps, lease, dedupe key), dead letters,
//! schedules and the outbox; and the controls behind them: pause and resume a queue, replay or
//! discard dead jobs (one, the selected ones, or every one a filter selects, after a preview
//! with the count), run a waiting job now, trigger a schedule, replay parked outbox rows.
//! Everything is server-rendered HTML; nothing needs JavaScript.
//!
//! [`router`] gives an [`axum::Router`] to serve on its own (the `jobs serve` command does) or to
//! mount in an application:
//!
//! ```no_run
//! # async fn run(pool: sqlx::PgPool) -> std::io::Result<()> {
//! use jobs_console::{router, AccessToken, ConsoleConfig};
//!
//! let token = AccessToken::from_env("JOBS_CONSOLE_TOKEN").expect("a token of 16 characters or more");
//! let config = ConsoleConfig::new().base_path("/jobs").access_token(token);
//! let app = axum::Router::new().nest("/jobs", router(pool, config));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>()).await
//! # }
//! ```
//!
//! # Safe by default
//!
//! - **Who may look.** With an [`AccessToken`], every page asks for it once (a sign-in form; it
//!   opens a session kept in a cookie that scripts cannot read and other sites do not send);
//!   tools may send it as `Authorization: Bearer`. Without one, the console answers only requests
//!   addressed to a loopback name (`localhost`, `127.0.0.1`, `[::1]`), so that another site's
//!   page cannot reach it through a rebound DNS name; names given to
//!   [`ConsoleConfig::allow_host`] may only look. `jobs serve` listens on 127.0.0.1 unless
//!   told otherwise, and refuses another address without a token or `--read-only`.
//! - **Who may act.** Every change is a POST carrying a CSRF token bound to the session (or to a
//!   cookie, without a token), and refused when the browser says it comes from another origin.
//!   Actions on many jobs show what they would change, with the count, and ask to confirm.
//!   [`ConsoleConfig::read_only`] shows everything and changes nothing.
//! - **What it shows.** Text from the database is escaped. [`ConsoleConfig::hide_payloads`]
//!   hides payloads and parked outbox messages, which may hold personal data.
//! - **What it did.** Every action is logged with tracing on the target `jobs_console::audit`,
//!   at INFO: who (the name given at sign-in, or `console` and the peer address), what, on what,
//!   and the result. Pausing a queue also records who paused it in the database.

mod actions;
mod audit;
mod chart;
mod config;
mod cookies;
mod forms;
mod html;
mod pages;
mod problem;
mod routes;
mod schema_gate;
mod security;
mod sessions;
mod state;
mod token;
mod urls;

pub use config::ConsoleConfig;
pub use routes::router;
pub use token::{AccessToken, TokenError, MIN_TOKEN_LEN};
