//! Progress of long operations, drawn on stderr only when it is a terminal: scripts, cron and
//! CI see nothing but the result.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often a spinner moves.
const TICK: Duration = Duration::from_millis(100);

/// A progress bar or spinner, hidden when stderr is not a terminal.
pub struct Progress(ProgressBar);

impl Progress {
    /// A bar counting up to `total`.
    pub fn bar(total: u64, message: &str) -> Self {
        let bar = ProgressBar::with_draw_target(Some(total), target());
        if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({eta})") {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(message.to_owned());
        Self(bar)
    }

    /// A spinner with a running count, for work whose size is not known up front.
    pub fn spinner(message: &str) -> Self {
        let bar = ProgressBar::with_draw_target(None, target());
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}: {pos} ({elapsed})") {
            bar.set_style(style);
        }
        bar.set_message(message.to_owned());
        bar.enable_steady_tick(TICK);
        Self(bar)
    }

    /// Counts `done` more.
    pub fn advance(&self, done: u64) {
        self.0.inc(done);
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

fn target() -> ProgressDrawTarget {
    if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}
