//! How commands show the jobs they touched: a table, a JSON object each, a count by kind.

use std::collections::BTreeMap;

use jobs_postgres::admin::JobRef;
use serde_json::{json, Value};

use crate::escape::shown;
use crate::table::{Align, Table};

/// The jobs, one per line (a dry run's, say), one per line, or nothing when there are none.
pub fn jobs_table(jobs: &[JobRef]) -> String {
    if jobs.is_empty() {
        return String::new();
    }
    let mut table = Table::new(&[
        ("ID", Align::Right),
        ("KIND", Align::Left),
        ("QUEUE", Align::Left),
    ]);
    for job in jobs {
        table.row(vec![
            job.id.to_string(),
            job.kind.clone(),
            job.queue.clone(),
        ]);
    }
    table.render()
}

/// A job as a JSON object: id, kind and queue.
pub fn job_ref_json(job: &JobRef) -> Value {
    json!({ "id": job.id, "kind": job.kind, "queue": job.queue })
}

/// `"send_email (queue email) 2, resize (queue default) 1"`.
pub fn by_kind(jobs: &[JobRef]) -> String {
    let mut counts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for job in jobs {
        *counts.entry((&job.kind, &job.queue)).or_default() += 1;
    }
    counts
        .iter()
        .map(|((kind, queue), n)| format!("{} (queue {}) {n}", shown(kind), shown(queue)))
        .collect::<Vec<_>>()
        .join(", ")
}
