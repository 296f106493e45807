//! `jobs`: operate a jobs queue from the command line.
//!
//! `jobs migrate`, `jobs stats`, `jobs dead list|show|replay|discard`,
//! `jobs outbox list|replay`, `jobs schedule remove`, `jobs prune` and `jobs check`, against the
//! database at `DATABASE_URL` or `--database-url`. The logic lives in
//! `jobs_postgres::admin` (also `jobs::admin`); this binary parses arguments, connects, and
//! prints.
//!
//! Exit codes: 0 success (and a healthy queue for `check`), 1 `check` found a threshold
//! crossed, 2 the command could not run (invalid arguments, unreachable database, ...), with
//! one line on stderr saying why.

mod cli;
mod commands;
mod confirm;
mod connect;
mod error;
mod escape;
mod progress;
mod table;

use std::process::ExitCode;

use clap::Parser;

use cli::Cli;
use error::CliError;

/// Exit code of a command that could not run.
const EXIT_ERROR: u8 = 2;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return argument_error(&error),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return fail(&CliError::Runtime(error)),
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(outcome) => outcome.exit_code(),
        Err(error) => fail(&error),
    }
}

/// Prints `error` as one line on stderr and returns the error exit code.
fn fail(error: &CliError) -> ExitCode {
    eprintln!("jobs: {}", escape::shown(&one_line(&error.to_string())));
    ExitCode::from(EXIT_ERROR)
}

/// Help and version go out as clap writes them; anything else is one line, without the usage
/// block clap appends.
fn argument_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = error.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            eprintln!(
                "jobs: a command is needed: migrate, stats, dead, outbox, prune or check (see `jobs --help`)"
            );
            ExitCode::from(EXIT_ERROR)
        }
        _ => {
            let rendered = error.render().to_string();
            let mut message = String::new();
            for line in rendered.lines() {
                let line = line.trim();
                if line.starts_with("Usage:") {
                    break;
                }
                if line.is_empty() || line.starts_with("For more information") {
                    continue;
                }
                let line = line.strip_prefix("error: ").unwrap_or(line);
                if !message.is_empty() {
                    message.push_str(if message.ends_with(':') { " " } else { "; " });
                }
                message.push_str(line);
            }
            eprintln!("jobs: {message} (see --help)");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// `text` on one line: line breaks inside an error message become `; `.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}
