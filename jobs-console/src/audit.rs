//! The audit log: one tracing event per action, on the target `jobs_console::audit`.

/// Records that `actor` did `action` on `target`, with its `result`, at INFO on the target
/// `jobs_console::audit` (route it to its own sink with a tracing filter on that target).
pub(crate) fn record(actor: &str, action: &str, target: &str, result: &str) {
    tracing::info!(
        target: "jobs_console::audit",
        actor,
        action,
        target,
        result,
        "console action"
    );
}
