//! One module per command: each calls `jobs_postgres::admin` and renders the result as text
//! (or JSON), which `main` prints.

mod check;
mod dead;
mod job;
mod job_refs;
mod migrate;
mod outbox;
mod prune;
mod queue;
mod schedule;
mod serve;
mod stats;
mod throughput;
mod workers;
mod workflow;

use std::io::Write;
use std::process::ExitCode;

use crate::cli::{
    Cli, Command, DeadCommand, JobCommand, OutboxCommand, QueueCommand, ScheduleCommand,
};
use crate::connect::connect;
use crate::error::CliError;

/// How a command that ran ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// All is well.
    Success,
    /// `check` found a threshold crossed.
    Unhealthy,
}

impl Outcome {
    /// The process exit code: 0, or 1 when unhealthy.
    pub fn exit_code(self) -> ExitCode {
        match self {
            Outcome::Success => ExitCode::SUCCESS,
            Outcome::Unhealthy => ExitCode::from(1),
        }
    }
}

/// What a command prints on stdout, and how it ended.
pub struct Report {
    /// The text, ending in a newline.
    pub text: String,
    /// How it ended.
    pub outcome: Outcome,
}

impl Report {
    fn success(text: String) -> Self {
        Self {
            text,
            outcome: Outcome::Success,
        }
    }
}

/// Connects, runs the command and prints its report.
pub async fn run(cli: Cli) -> Result<Outcome, CliError> {
    if let Command::Serve {
        listen,
        read_only,
        hide_payloads,
        token_file,
        allow_host,
        secure_cookies,
    } = cli.command
    {
        let settings = serve::Settings {
            listen,
            read_only,
            hide_payloads,
            token_file,
            allowed_hosts: allow_host,
            secure_cookies,
        };
        return serve::run(cli.database_url.as_deref(), cli.connect_timeout, settings).await;
    }
    let pool = connect(cli.database_url.as_deref(), cli.connect_timeout).await?;
    let report = match cli.command {
        Command::Migrate => migrate::run(&pool).await,
        Command::Stats { json } => stats::run(&pool, json).await,
        Command::Workers { json } => workers::run(&pool, json).await,
        Command::Throughput { minutes, json } => throughput::run(&pool, minutes, json).await,
        Command::Dead { command } => match command {
            DeadCommand::List {
                filter,
                limit,
                json,
            } => dead::list(&pool, &filter, limit, json).await,
            DeadCommand::Show { id, json } => dead::show(&pool, id, json).await,
            DeadCommand::Replay(args) => dead::replay(&pool, args).await,
            DeadCommand::Discard(args) => dead::discard(&pool, args).await,
        },
        Command::Outbox { command } => match command {
            OutboxCommand::List { topic, limit, json } => {
                outbox::list(&pool, topic.as_deref(), limit, json).await
            }
            OutboxCommand::Replay {
                ids,
                all,
                change,
                confirm,
            } => outbox::replay(&pool, if all { None } else { Some(&ids) }, change, confirm).await,
        },
        Command::Job { command } => match command {
            JobCommand::List(args) => job::list(&pool, &args).await,
            JobCommand::Show { id, json } => dead::show(&pool, id, json).await,
            JobCommand::Workflow { id, limit, json } => {
                workflow::show(&pool, id, limit, json).await
            }
            JobCommand::RunNow { ids, json } => job::run_now(&pool, &ids, json).await,
            JobCommand::Cancel(args) => job::cancel(&pool, args).await,
        },
        Command::Queue { command } => match command {
            QueueCommand::Pause {
                queue,
                reason,
                by,
                json,
            } => queue::pause(&pool, &queue, reason.as_deref(), by, json).await,
            QueueCommand::Resume { queue, json } => queue::resume(&pool, &queue, json).await,
        },
        Command::Schedule { command } => match command {
            ScheduleCommand::Remove {
                name,
                force,
                change,
            } => schedule::remove(&pool, &name, force, change).await,
            ScheduleCommand::Trigger { name, json } => schedule::trigger(&pool, &name, json).await,
        },
        Command::Prune {
            older_than,
            batch_size,
            change,
        } => prune::run(&pool, older_than, batch_size, change).await,
        Command::Check {
            max_dead,
            max_ready_age,
            max_expired_lease_age,
            schedule_grace,
            max_unpublished_age,
            max_parked,
            max_paused,
            max_unserved_age,
            max_waiting_age,
        } => {
            let thresholds = jobs_postgres::admin::HealthThresholds {
                max_dead,
                max_ready_age,
                max_expired_lease_age,
                schedule_grace,
                max_unpublished_age,
                max_parked,
                max_paused,
                max_unserved_age,
                max_waiting_age,
            };
            check::run(&pool, &thresholds).await
        }
        Command::Serve { .. } => unreachable!("served above, without connecting first"),
    };
    pool.close().await;
    let report = report?;
    // A reader that went away (`jobs stats | head -1`) is not an error worth a message.
    let _ = std::io::stdout().lock().write_all(report.text.as_bytes());
    Ok(report.outcome)
}

/// `n` followed by `word`, plural unless `n` is 1 (`"1 job"`, `"3 jobs"`).
fn count(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// A JSON document as pretty text ending in a newline, with nothing a terminal could act on
/// (see [`json_safe`](crate::escape::json_safe)).
fn json_text(value: &serde_json::Value) -> String {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    let mut text = crate::escape::json_safe(&text);
    text.push('\n');
    text
}
