//! Drain rate with many done rows retained in the table vs an empty table.

use jobs::postgres::worker::Completion;

use crate::measure::{insert_done_noops, insert_ready_noops, Fresh};
use crate::options::Options;
use crate::report::Report;
use crate::workloads::drain::{drain_rate, drain_ready, Drainer};

const CONCURRENCY: usize = 16;

pub async fn run(options: &Options, report: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    let (mut retained, mut empty) = (Vec::new(), Vec::new());
    let drainer = Drainer::Framework(Completion::default());
    for _ in 0..options.runs {
        let fresh = Fresh::new(2).await?;
        empty.push(drain_rate(&fresh, options.drain_jobs, CONCURRENCY, &drainer).await?);

        sqlx::query("TRUNCATE jobs_queue")
            .execute(&fresh.pool)
            .await?;
        insert_done_noops(&fresh.pool, options.retained_rows).await?;
        insert_ready_noops(&fresh.pool, options.drain_jobs).await?;
        fresh.vacuum().await?;
        retained.push(drain_ready(&fresh, options.drain_jobs, CONCURRENCY, &drainer).await?);
    }
    report.ratio(
        &format!(
            "growth: {} done rows retained vs empty, C={CONCURRENCY}",
            options.retained_rows
        ),
        &retained,
        &empty,
        "jobs/s",
        ">= 0.9",
    );
    Ok(())
}
