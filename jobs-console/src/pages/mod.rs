//! The pages: each reads what it shows through `jobs::admin` and renders it.

pub(crate) mod dead;
pub(crate) mod job;
pub(crate) mod jobs;
pub(crate) mod login;
pub(crate) mod outbox;
pub(crate) mod overview;
pub(crate) mod schedules;
pub(crate) mod workers;
pub(crate) mod workflow;

use serde::Deserialize;

/// The query of a page an action redirects to: what the action did.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Notice {
    /// What was done, shown at the top of the page.
    pub(crate) done: Option<String>,
}
