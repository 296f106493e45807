//! Draining pre-inserted no-op jobs: the worker, batched and per-job, vs raw claim-then-done
//! loops at the same concurrency.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use jobs::{Completion, Worker, WorkerConfig};
use sqlx::PgPool;

use crate::kinds::NOOP_RUNS;
use crate::measure::{insert_ready_noops, wait_until_drained, Fresh};
use crate::options::Options;
use crate::raw;
use crate::report::Report;

/// How the jobs are drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drainer {
    Framework(Completion),
    RawLoops { loops: usize, batch: i64 },
}

pub async fn run(options: &Options, report: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    for &concurrency in &options.drain_concurrency {
        let batched = Drainer::Framework(Completion::default());
        let per_job = Drainer::Framework(Completion::PerJob);
        let raw_batched = Drainer::RawLoops {
            loops: (concurrency / options.raw_batch).max(1),
            batch: options.raw_batch as i64,
        };
        let raw_per_job = Drainer::RawLoops {
            loops: concurrency,
            batch: 1,
        };
        let mut rates = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        for run in 0..options.runs {
            let fresh = Fresh::new(concurrency as u32 + 8).await?;
            let mut sides = [
                (0, batched),
                (1, per_job),
                (2, raw_batched),
                (3, raw_per_job),
            ];
            sides.rotate_left(run % 4);
            for (slot, drainer) in sides {
                rates[slot]
                    .push(drain_rate(&fresh, options.drain_jobs, concurrency, drainer).await?);
            }
        }
        let [batched, per_job, raw_batched, raw_per_job] = &rates;
        report.ratio(
            &format!("drain C={concurrency}, batched"),
            batched,
            raw_batched,
            "jobs/s",
            ">= 0.8",
        );
        report.ratio(
            &format!("drain C={concurrency}, per-job outcome"),
            per_job,
            raw_per_job,
            "jobs/s",
            ">= 0.8",
        );
        report.ratio(
            &format!("drain C={concurrency}, batched / per-job"),
            batched,
            per_job,
            "jobs/s",
            ">= 5",
        );
    }
    Ok(())
}

/// Fills the table with `jobs` ready no-ops, vacuums, and measures how fast `drainer` empties it.
pub async fn drain_rate(
    fresh: &Fresh,
    jobs: usize,
    concurrency: usize,
    drainer: Drainer,
) -> Result<f64, Box<dyn std::error::Error>> {
    sqlx::query("TRUNCATE jobs_queue")
        .execute(&fresh.pool)
        .await?;
    insert_ready_noops(&fresh.pool, jobs).await?;
    fresh.vacuum().await?;
    drain_ready(&fresh.pool, jobs, concurrency, drainer).await
}

/// Measures how fast `drainer` completes the `jobs` ready jobs already in the table.
pub async fn drain_ready(
    pool: &PgPool,
    jobs: usize,
    concurrency: usize,
    drainer: Drainer,
) -> Result<f64, Box<dyn std::error::Error>> {
    let started = Instant::now();
    match drainer {
        Drainer::Framework(completion) => {
            let runs = NOOP_RUNS.load(Ordering::Relaxed) + jobs as u64;
            let worker = start_worker(pool, concurrency, completion)?;
            let drained = wait_until_drained(pool, runs, Duration::from_secs(600)).await?;
            worker.shutdown().await?;
            Ok(jobs as f64 / (drained - started).as_secs_f64())
        }
        Drainer::RawLoops { loops, batch } => {
            let tasks: Vec<_> = (0..loops)
                .map(|_| tokio::spawn(raw::drain_loop(pool.clone(), batch)))
                .collect();
            let mut completed = 0;
            for task in tasks {
                completed += task.await??;
            }
            assert_eq!(
                completed as usize, jobs,
                "the raw loops must complete every job"
            );
            Ok(jobs as f64 / started.elapsed().as_secs_f64())
        }
    }
}

/// A worker for `noop` jobs at `concurrency`, with the default settings otherwise.
pub fn start_worker(
    pool: &PgPool,
    concurrency: usize,
    completion: Completion,
) -> Result<jobs::WorkerHandle, jobs::WorkerError> {
    start_worker_with(
        pool,
        concurrency,
        WorkerConfig {
            completion,
            ..WorkerConfig::default()
        },
    )
}

/// A worker for `noop` jobs at `concurrency`, with `config`.
pub fn start_worker_with(
    pool: &PgPool,
    concurrency: usize,
    config: WorkerConfig,
) -> Result<jobs::WorkerHandle, jobs::WorkerError> {
    Ok(Worker::builder(pool.clone())
        .kinds(["noop"])
        .queue("default", concurrency)
        .config(config)
        .build()?
        .start())
}
