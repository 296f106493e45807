//! What the throughput bookkeeping costs the drain: the worker with its runs counted per minute,
//! queue and kind (`WorkerConfig::throughput`, the default) against the same worker with the
//! counting off, in the same run on the same database. Both record their presence (that costs
//! one small statement per worker every 5 s, with or without the counting).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use jobs::WorkerConfig;

use crate::kinds::NOOP_RUNS;
use crate::measure::{insert_ready_noops, wait_until_drained, Fresh};
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
    sqlx::query("TRUNCATE jobs_queue, jobs_throughput")
        .execute(&fresh.pool)
        .await?;
    insert_ready_noops(&fresh.pool, jobs).await?;
    fresh.vacuum().await?;
    let runs = NOOP_RUNS.load(Ordering::Relaxed) + jobs as u64;
    let started = Instant::now();
    let worker = start_worker_with(
        &fresh.pool,
        concurrency,
        WorkerConfig {
            throughput: counted,
            ..WorkerConfig::default()
        },
    )?;
    let drained = wait_until_drained(&fresh.pool, runs, Duration::from_secs(600)).await?;
    worker.shutdown().await?;
    let written: i64 =
        sqlx::query_scalar("SELECT coalesce(sum(done), 0)::int8 FROM jobs_throughput")
            .fetch_one(&fresh.pool)
            .await?;
    let expected = if counted { jobs as i64 } else { 0 };
    assert_eq!(written, expected, "the throughput counts every run, once");
    Ok(jobs as f64 / (drained - started).as_secs_f64())
}
