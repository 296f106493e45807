//! Asking before a broad change: dead jobs selected without `--id`, every parked outbox row.
//!
//! On a terminal the question goes to stderr and the answer comes from stdin. Without a
//! terminal on stdin (a script, cron, CI) there is nobody to ask: the command is refused unless
//! `--yes` was given, rather than waiting for an answer that never comes or going ahead
//! unasked.

use std::io::{BufRead, IsTerminal, Write};

use crate::error::CliError;

/// Whether the operator must be asked before `action` (`"replaying every dead job"`): not with
/// `yes`; refused when stdin is not a terminal; yes otherwise (then call [`ask`] once the
/// question can say how much it would change).
pub fn must_ask(action: &str, yes: bool) -> Result<bool, CliError> {
    if yes {
        return Ok(false);
    }
    if !std::io::stdin().is_terminal() {
        return Err(CliError::ConfirmationNeeded {
            action: action.to_owned(),
        });
    }
    Ok(true)
}

/// Asks `question` (`"replay 12 dead jobs (every dead job)"`) on the terminal; an error unless
/// the answer is yes.
pub fn ask(question: &str) -> Result<(), CliError> {
    let mut stderr = std::io::stderr().lock();
    let _ = write!(stderr, "{question}? [y/N] ");
    let _ = stderr.flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(CliError::Prompt)?;
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(CliError::Declined {
            question: question.to_owned(),
        }),
    }
}
