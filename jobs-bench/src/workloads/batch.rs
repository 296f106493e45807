//! Draining a batch: jobs enqueued as one batch with a callback, against the same jobs enqueued
//! without a batch, by the same worker (default settings: batched outcomes) in the same run on
//! the same database. Every outcome write moves the counts of each chunk of 64 ids its members
//! belong to (`jobs_workflow_steps`), and every chunk that closes moves the batch row once, at
//! commit: the fan-in must cost the drain less than a fifth (batch / plain >= 0.8).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use jobs::postgres::batch::batch_outcome_by_id;
use jobs::{Batch, Completion};

use crate::kinds::{noop, NOOP_RUNS};
use crate::measure::{wait_until_drained, Fresh};
use crate::options::Options;
use crate::report::Report;
use crate::workloads::drain::start_worker;

pub async fn run(options: &Options, report: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    for &concurrency in options.drain_concurrency.iter().rev() {
        let mut rates = [Vec::new(), Vec::new()];
        for run in 0..options.runs {
            let fresh = Fresh::new(concurrency as u32 + 8).await?;
            let mut sides = [(0, true), (1, false)];
            sides.rotate_left(run % 2);
            for (slot, in_batch) in sides {
                rates[slot]
                    .push(drain_rate(&fresh, options.batch_jobs, concurrency, in_batch).await?);
            }
        }
        let [batch, plain] = &rates;
        report.ratio(
            &format!(
                "drain C={concurrency}, {} jobs: one batch / plain",
                options.batch_jobs
            ),
            batch,
            plain,
            "jobs/s",
            ">= 0.8",
        );
    }
    report.note(
        "batch drain: the same no-op jobs enqueued through the API, as one batch with a no-op \
         callback or plainly, then vacuumed; the batch side's time runs until its callback has \
         run, and its rate counts the members"
            .into(),
    );
    Ok(())
}

/// Enqueues `jobs` no-ops, as one batch with a callback when `in_batch`, vacuums, and measures
/// how fast a worker with the default settings drains them (and the callback); checks that the
/// batch counted every member done.
async fn drain_rate(
    fresh: &Fresh,
    jobs: usize,
    concurrency: usize,
    in_batch: bool,
) -> Result<f64, Box<dyn std::error::Error>> {
    sqlx::query("TRUNCATE jobs_queue, jobs_batches, jobs_batch_chunks")
        .execute(&fresh.pool)
        .await?;
    let members = (0..jobs).map(|n| n as i64);
    let batch = if in_batch {
        let batch = Batch::new()
            .then(noop::builder(-1))
            .enqueue(&fresh.pool, members.map(noop::builder))
            .await?;
        assert_eq!(batch.members.len(), jobs, "every member written");
        Some(batch.id)
    } else {
        let enqueued = noop::enqueue_many(&fresh.pool, members.map(|n| noop::Args { n })).await?;
        assert_eq!(enqueued.len(), jobs, "every job written");
        None
    };
    fresh.vacuum().await?;
    sqlx::query("VACUUM ANALYZE jobs_batches, jobs_batch_chunks")
        .execute(&fresh.pool)
        .await?;
    let callbacks = u64::from(in_batch);
    let runs = NOOP_RUNS.load(Ordering::Relaxed) + jobs as u64 + callbacks;
    let started = Instant::now();
    let worker = start_worker(&fresh.pool, concurrency, Completion::default())?;
    let drained = wait_until_drained(&fresh.pool, runs, Duration::from_secs(600)).await?;
    worker.shutdown().await?;
    if let Some(batch) = batch {
        let outcome = batch_outcome_by_id(&fresh.pool, batch).await?;
        assert_eq!(
            (outcome.done, outcome.pending),
            (jobs as u64, 0),
            "the batch counted every member done"
        );
        assert!(outcome.ended_at.is_some(), "the batch ended");
    }
    Ok(jobs as f64 / (drained - started).as_secs_f64())
}
