//! The worker process the chaos tests start, kill, pause and signal: runs the chaos job kinds on
//! queue `chaos` until SIGINT/SIGTERM (graceful), or a second one (at once).
//!
//! ```text
//! chaos-worker --database-url=postgres://... [--lease-ms=2000] [--concurrency=16] ...
//! ```
//!
//! Logs go to stderr (`RUST_LOG` filters them; default `info,sqlx=warn`). Exit codes: 0 after a
//! graceful shutdown, 128 + the signal after a forced one, 1 when stopped before the database
//! ever answered, 2 for a bad command line or setup.

use std::process::ExitCode;
use std::str::FromStr;

use jobs::{Schedule, Worker};
use jobs_chaos::{WorkerSettings, APPLICATION_NAME, QUEUE};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::ConnectOptions;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let settings = match WorkerSettings::from_args(std::env::args().skip(1)) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("chaos-worker: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("chaos-worker: cannot start the runtime: {error}");
            return ExitCode::from(2);
        }
    };
    let code = runtime.block_on(run(settings));
    // Exit without waiting for tasks: after a forced stop, a job may still be running.
    std::process::exit(code)
}

async fn run(settings: WorkerSettings) -> i32 {
    let options = match PgConnectOptions::from_str(&settings.database_url) {
        Ok(options) => options
            .application_name(APPLICATION_NAME)
            .disable_statement_logging(),
        Err(error) => {
            eprintln!("chaos-worker: bad --database-url: {error}");
            return 2;
        }
    };
    // Lazy: the worker starts (and stays up) even when the database cannot be reached yet.
    let pool = PgPoolOptions::new()
        .max_connections(settings.pool_size)
        .acquire_timeout(settings.acquire_timeout)
        .connect_lazy_with(options);
    let mut builder = Worker::builder(pool.clone())
        .kinds(settings.kinds())
        .state(pool)
        .queue(QUEUE, settings.concurrency)
        .config(settings.worker_config());
    if let Some(every) = settings.schedule_every {
        match Schedule::every("chaos_tick", every) {
            Ok(schedule) => builder = builder.schedule(schedule),
            Err(error) => {
                eprintln!("chaos-worker: bad --schedule-every-ms: {error}");
                return 2;
            }
        }
    }
    let worker = match builder.build() {
        Ok(worker) => worker,
        Err(error) => {
            eprintln!("chaos-worker: {error}");
            return 2;
        }
    };
    tracing::info!(pid = std::process::id(), ?settings, "chaos worker starting");
    match worker.run_until_signalled().await {
        Ok(stopped) => {
            tracing::info!(?stopped, code = stopped.exit_code(), "chaos worker exiting");
            stopped.exit_code()
        }
        Err(error) => {
            eprintln!("chaos-worker: {error}");
            1
        }
    }
}
