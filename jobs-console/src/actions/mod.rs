//! The controls: each is a POST with a checked CSRF token, recorded in the audit log, answered
//! with a redirect to the page it came from (or, for an action on many jobs, first with a
//! preview to confirm).

pub(crate) mod cancel;
pub(crate) mod dead;
pub(crate) mod jobs;
pub(crate) mod outbox;
pub(crate) mod queues;
pub(crate) mod schedules;

use axum::response::Redirect;

use crate::state::Console;
use crate::urls::percent_encode;

/// A redirect to `page` telling what was done.
pub(crate) fn done(console: &Console, page: &str, what: &str) -> Redirect {
    let separator = if page.contains('?') { '&' } else { '?' };
    Redirect::to(&format!(
        "{}{separator}done={}",
        console.config.href(page),
        percent_encode(what)
    ))
}

/// "1 job" or "3 jobs".
pub(crate) fn jobs(count: usize) -> String {
    if count == 1 {
        "1 job".to_owned()
    } else {
        format!("{count} jobs")
    }
}
