//! `jobs serve`: the web console, safe by default.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use jobs_console::{AccessToken, ConsoleConfig, TokenError};
use tracing_subscriber::EnvFilter;

use super::Outcome;
use crate::connect::connect_lazily;
use crate::error::CliError;

/// The environment variable read for the access token when no file is given.
pub const TOKEN_VARIABLE: &str = "JOBS_CONSOLE_TOKEN";

/// Connections the console uses at most.
const POOL_SIZE: u32 = 4;

/// How `jobs serve` was asked to serve.
#[derive(Debug)]
pub struct Settings {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Change nothing.
    pub read_only: bool,
    /// Hide payloads.
    pub hide_payloads: bool,
    /// Where the access token is.
    pub token_file: Option<PathBuf>,
    /// Host names answered without a token.
    pub allowed_hosts: Vec<String>,
    /// Mark cookies Secure.
    pub secure_cookies: bool,
}

/// Serves the console until SIGINT or SIGTERM. Refuses an address other hosts can reach unless
/// the console has an access token or is read-only. The database need not be reachable at
/// start: the pages say so until it is.
pub async fn run(
    database_url: Option<&str>,
    connect_timeout: Duration,
    settings: Settings,
) -> Result<Outcome, CliError> {
    let token = access_token(settings.token_file.as_deref())?;
    let reachable = !settings.listen.ip().is_loopback() || !settings.allowed_hosts.is_empty();
    if reachable && token.is_none() && !settings.read_only {
        return Err(CliError::ConsoleUnprotected {
            listen: settings.listen.to_string(),
        });
    }
    let pool = connect_lazily(database_url, connect_timeout, POOL_SIZE)?;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("warn,jobs_console::audit=info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
    let protected = token.is_some();
    let mut config = ConsoleConfig::new()
        .read_only(settings.read_only)
        .hide_payloads(settings.hide_payloads)
        .secure_cookies(settings.secure_cookies);
    if let Some(token) = token {
        config = config.access_token(token);
    }
    for host in settings.allowed_hosts {
        config = config.allow_host(host);
    }
    let serve_error = |source| CliError::Serve {
        listen: settings.listen.to_string(),
        source,
    };
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(serve_error)?;
    let bound = listener.local_addr().map_err(serve_error)?;
    // Listening for the stop signals before saying where the console is: a supervisor may stop
    // it as soon as it has read the address.
    let stop = stop_signal().map_err(serve_error)?;
    println!(
        "jobs console on http://{bound}/{}{}{}",
        if protected {
            " (access token required)"
        } else {
            ""
        },
        if settings.read_only {
            " (read-only)"
        } else {
            ""
        },
        if settings.hide_payloads {
            " (payloads hidden)"
        } else {
            ""
        },
    );
    let app = jobs_console::router(pool.clone(), config);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(stop)
    .await
    .map_err(serve_error)?;
    pool.close().await;
    Ok(Outcome::Success)
}

/// Resolves on the first SIGINT or SIGTERM; both are listened for from this call on.
#[cfg(unix)]
fn stop_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}

/// Resolves on the first ctrl-c.
#[cfg(not(unix))]
fn stop_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}

/// The access token from `file`, else from [`TOKEN_VARIABLE`] when it is set; none otherwise.
fn access_token(file: Option<&std::path::Path>) -> Result<Option<AccessToken>, TokenError> {
    match file {
        Some(file) => AccessToken::from_file(file).map(Some),
        None if std::env::var_os(TOKEN_VARIABLE).is_some() => {
            AccessToken::from_env(TOKEN_VARIABLE).map(Some)
        }
        None => Ok(None),
    }
}
