//! What the throughput bookkeeping costs the drain: the worker with its runs counted per minute,
//! queue and kind (`WorkerConfig::throughput`, the default) against the same worker with the
//! counting off, in the same run on the same database. Both record their presence (that costs
//! one small statement per worker every 5 s, with or without the counting).

use jobs::WorkerConfig;

use crate::measure::{timed_noop_drain, Fresh};
use crate::options::Options;
use crate::report::Report;
use crate::workloads::drain::start_worker_with;

pub async fn run(options: &Options, report: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    for &concurrency in &options.drain_concurrency {
        let mut rates = [Vec::new(), Vec::new()];
        for run in 0..options.runs {
            let fresh = Fresh::new(concurrency as u32 + 9).await?;
            let mut sides = [(0, true), (1, false)];
            sides.rotate_left(run % 2);
            for (slot, counted) in sides {
                rates[slot]
                    .push(drain_rate(&fresh, options.drain_jobs, concurrency, counted).await?);
            }
        }
        let [counted, uncounted] = &rates;
        report.ratio(
            &format!("drain C={concurrency}, throughput counted / not"),
            counted,
            uncounted,
            "jobs/s",
            ">= 0.95",
        );
    }
    Ok(())
}

/// Fills the table with `jobs` ready no-ops, vacuums, and measures how fast a batched worker
/// empties it, its throughput `counted` or not; checks that the counts add up.
async fn drain_rate(
    fresh: &Fresh,
    jobs: usize,
    concurrency: usize,
    counted: bool,
) -> Result<f64, Box<dyn std::error::Error>> {
    let rate = timed_noop_drain(fresh, "jobs_queue, jobs_throughput", jobs, || {
        start_worker_with(
            &fresh.pool,
            concurrency,
            WorkerConfig {
                throughput: counted,
                ..WorkerConfig::default()
            },
        )
    })
    .await?;
    let written: i64 =
        sqlx::query_scalar("SELECT coalesce(sum(done), 0)::int8 FROM jobs_throughput")
            .fetch_one(&fresh.pool)
            .await?;
    let expected = if counted { jobs as i64 } else { 0 };
    assert_eq!(written, expected, "the throughput counts every run, once");
    Ok(rate)
}
