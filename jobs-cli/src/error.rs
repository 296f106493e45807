//! Why a command could not run; each becomes one line on stderr and exit code 2.

use jobs_core::JobId;
use jobs_postgres::admin::AdminError;
use jobs_postgres::MigrateError;

/// Why a command could not run.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Neither `--database-url` nor `DATABASE_URL` was given.
    #[error("no database: set DATABASE_URL or pass --database-url postgres://user@host/db")]
    NoDatabase,
    /// The URL does not parse.
    #[error("invalid database URL: {0}")]
    InvalidUrl(String),
    /// The server did not accept a connection.
    #[error("cannot reach the database at {target}: {source}")]
    Connect {
        /// Host, port and database, without credentials.
        target: String,
        /// Why.
        #[source]
        source: sqlx::Error,
    },
    /// The server did not answer within the connect timeout.
    #[error("cannot reach the database at {target}: no answer within {waited}")]
    ConnectTimeout {
        /// Host, port and database, without credentials.
        target: String,
        /// The timeout, as given.
        waited: String,
    },
    /// An operation on the queue failed.
    #[error(transparent)]
    Admin(#[from] AdminError),
    /// A setting cannot work.
    #[error(transparent)]
    Config(#[from] jobs_postgres::worker::ConfigError),
    /// Migrating failed.
    #[error(transparent)]
    Migrate(#[from] MigrateError),
    /// `dead show` named a job that does not exist.
    #[error("no job {0}: never enqueued, or already discarded or pruned")]
    NoSuchJob(JobId),
    /// `schedule remove` without `--force` on a schedule whose ticks are being kept up with.
    #[error("schedule {name} is still kept up with (last tick dealt with at {last_tick}{next}): a worker probably declares it and would register it again; remove it from the code and stop those workers, or pass --force")]
    ScheduleActive {
        /// The schedule.
        name: String,
        /// The last tick dealt with, RFC 3339.
        last_tick: String,
        /// ", next due at ..." when it has a next tick.
        next: String,
    },
    /// `schedule trigger` of a schedule that does not exist.
    #[error("no schedule named {name}: `jobs stats` lists the schedules")]
    ScheduleNotFound {
        /// The schedule.
        name: String,
    },
    /// `schedule trigger` of a schedule registered by an older version, which did not record
    /// its jobs' settings.
    #[error("schedule {name} was registered by an older version, which did not record its jobs' priority and max attempts: start a worker of this version, which records them, and trigger again")]
    ScheduleSettingsUnknown {
        /// The schedule.
        name: String,
    },
    /// `serve` on an address other hosts can reach (or answering a proxy's host name), without
    /// an access token or `--read-only`.
    #[error("not serving on {listen}: other hosts can reach the console (a non-loopback address, or --allow-host), so it needs an access token (--token-file FILE, or the environment variable JOBS_CONSOLE_TOKEN) or --read-only; or listen on 127.0.0.1 without --allow-host")]
    ConsoleUnprotected {
        /// The address asked for.
        listen: String,
    },
    /// `serve` was given an access token that cannot be used.
    #[error(transparent)]
    ConsoleToken(#[from] jobs_console::TokenError),
    /// `serve` could not listen, or serving failed.
    #[error("cannot serve the console on {listen}: {source}")]
    Serve {
        /// The address.
        listen: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A broad change without `--yes`, and no terminal on stdin to ask on.
    #[error("not done: {action} needs confirmation, and stdin is not a terminal to ask on; pass --yes to go ahead, or --dry-run to see what it would change")]
    ConfirmationNeeded {
        /// What would have been done.
        action: String,
    },
    /// The operator answered no.
    #[error("not done: the answer to \"{question}?\" was not yes")]
    Declined {
        /// The question asked.
        question: String,
    },
    /// The answer to a confirmation could not be read.
    #[error("cannot read the answer: {0}")]
    Prompt(#[source] std::io::Error),
    /// The async runtime could not start.
    #[error("could not start: {0}")]
    Runtime(#[source] std::io::Error),
}
