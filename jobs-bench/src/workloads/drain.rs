//! Draining pre-inserted no-op jobs: the worker, batched and per-job, vs raw claim-then-done
//! loops at the same concurrency, from Rust and, where it is installed, from pgbench.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use jobs::{Completion, Worker, WorkerConfig};
use sqlx::PgPool;

use crate::kinds::NOOP_RUNS;
use crate::measure::{insert_ready_noops, wait_until_drained, Fresh};
use crate::options::Options;
use crate::pgbench::Pgbench;
use crate::raw;
use crate::report::Report;

/// How the jobs are drained.
#[derive(Debug, Clone)]
pub enum Drainer {
    /// A worker, completing as given.
    Framework(Completion),
    /// `loops` Rust loops, each claiming up to `batch` jobs and marking them done.
    RawLoops { loops: usize, batch: i64 },
    /// The same statements as the raw loops, from `clients` pgbench clients.
    Pgbench {
        pgbench: Pgbench,
        clients: usize,
        batch: i64,
    },
}

/// The batched ceiling at its fastest, whatever the concurrency: pgbench clients, and jobs
/// claimed and completed per statement (no-op jobs have no use for slots, so this side is not
/// held to the concurrency's jobs in flight).
const LARGE_CLAIMS: (usize, i64) = (4, 100);

/// The sides of one concurrency, in the order of the first run: the framework batched and
/// per-job, the raw loops batched and per-job, and, with pgbench, the raw loops' statements
/// from pgbench batched and per-job, and batched with [`LARGE_CLAIMS`].
fn sides(options: &Options, concurrency: usize, pgbench: Option<&Pgbench>) -> Vec<Drainer> {
    let raw_loops = (concurrency / options.raw_batch).max(1);
    let raw_batch = options.raw_batch as i64;
    let mut sides = vec![
        Drainer::Framework(Completion::default()),
        Drainer::Framework(Completion::PerJob),
        Drainer::RawLoops {
            loops: raw_loops,
            batch: raw_batch,
        },
        Drainer::RawLoops {
            loops: concurrency,
            batch: 1,
        },
    ];
    if let Some(pgbench) = pgbench {
        sides.push(Drainer::Pgbench {
            pgbench: pgbench.clone(),
            clients: raw_loops,
            batch: raw_batch,
        });
        sides.push(Drainer::Pgbench {
            pgbench: pgbench.clone(),
            clients: concurrency,
            batch: 1,
        });
        let (clients, batch) = LARGE_CLAIMS;
        sides.push(Drainer::Pgbench {
            pgbench: pgbench.clone(),
            clients,
            batch,
        });
    }
    sides
}

pub async fn run(options: &Options, report: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    let pgbench = Pgbench::find();
    match &pgbench {
        Some(pgbench) => report.note(format!(
            "drain ceilings also run through pgbench ({}): the raw loops' statements, --protocol=prepared, as many clients as the raw loops",
            pgbench.program().display()
        )),
        None => report.note(
            "pgbench is not installed (Debian: postgresql-contrib, or set PGBENCH): the drain ceilings are the Rust raw loops alone".to_string(),
        ),
    }
    for &concurrency in &options.drain_concurrency {
        let sides = sides(options, concurrency, pgbench.as_ref());
        let mut rates = vec![Vec::new(); sides.len()];
        for run in 0..options.runs {
            let fresh = Fresh::new(2).await?;
            let mut order: Vec<usize> = (0..sides.len()).collect();
            order.rotate_left(run % sides.len());
            for slot in order {
                let rate = drain_rate(&fresh, options.drain_jobs, concurrency, &sides[slot]);
                rates[slot].push(rate.await?);
            }
        }
        let (batched, per_job, raw_batched, raw_per_job) =
            (&rates[0], &rates[1], &rates[2], &rates[3]);
        let name = |what: &str| format!("drain C={concurrency}, {what}");
        report.ratio(&name("batched"), batched, raw_batched, "jobs/s", ">= 0.8");
        report.ratio(
            &name("per-job outcome"),
            per_job,
            raw_per_job,
            "jobs/s",
            ">= 0.8",
        );
        report.ratio(
            &name("batched / per-job"),
            batched,
            per_job,
            "jobs/s",
            ">= 5",
        );
        if let [_, _, _, _, pgbench_batched, pgbench_per_job, pgbench_large] = &rates[..] {
            // The batched targets: at least half the ceiling at concurrency 16, and 0.8 of it
            // at 64.
            let batched_target = if concurrency >= 64 {
                ">= 0.8"
            } else {
                ">= 0.5"
            };
            let information = "(information: the Rust ceiling itself)";
            let (clients, batch) = LARGE_CLAIMS;
            let lines = [
                (
                    "batched, vs pgbench",
                    batched,
                    pgbench_batched,
                    batched_target,
                ),
                (
                    "per-job outcome, vs pgbench",
                    per_job,
                    pgbench_per_job,
                    ">= 0.8",
                ),
                (
                    &format!("batched, vs pgbench with {clients} clients claiming {batch}"),
                    batched,
                    pgbench_large,
                    batched_target,
                ),
                (
                    "raw loops batched, vs pgbench",
                    raw_batched,
                    pgbench_batched,
                    information,
                ),
                (
                    "raw loops per-job, vs pgbench",
                    raw_per_job,
                    pgbench_per_job,
                    information,
                ),
            ];
            for (what, framework, ceiling, target) in lines {
                report.ratio(&name(what), framework, ceiling, "jobs/s", target);
            }
        }
    }
    Ok(())
}

/// Fills the table with `jobs` ready no-ops, vacuums, and measures how fast `drainer` empties it.
pub async fn drain_rate(
    fresh: &Fresh,
    jobs: usize,
    concurrency: usize,
    drainer: &Drainer,
) -> Result<f64, Box<dyn std::error::Error>> {
    sqlx::query("TRUNCATE jobs_queue")
        .execute(&fresh.pool)
        .await?;
    insert_ready_noops(&fresh.pool, jobs).await?;
    fresh.vacuum().await?;
    drain_ready(fresh, jobs, concurrency, drainer).await
}

/// Measures how fast `drainer` completes the `jobs` ready jobs already in the table.
pub async fn drain_ready(
    fresh: &Fresh,
    jobs: usize,
    concurrency: usize,
    drainer: &Drainer,
) -> Result<f64, Box<dyn std::error::Error>> {
    match drainer {
        Drainer::Framework(completion) => {
            let pool = fresh.open_pool(concurrency as u32 + 8).await?;
            let started = Instant::now();
            let runs = NOOP_RUNS.load(Ordering::Relaxed) + jobs as u64;
            let worker = start_worker(&pool, concurrency, *completion)?;
            let drained = wait_until_drained(&pool, runs, Duration::from_secs(600)).await?;
            worker.shutdown().await?;
            pool.close().await;
            Ok(jobs as f64 / (drained - started).as_secs_f64())
        }
        Drainer::RawLoops { loops, batch } => {
            let pool = fresh.open_pool(*loops as u32).await?;
            let started = Instant::now();
            let tasks: Vec<_> = (0..*loops)
                .map(|_| tokio::spawn(raw::drain_loop(pool.clone(), *batch)))
                .collect();
            let mut completed = 0;
            for task in tasks {
                completed += task.await??;
            }
            let rate = jobs as f64 / started.elapsed().as_secs_f64();
            pool.close().await;
            assert_eq!(
                completed as usize, jobs,
                "the raw loops must complete every job"
            );
            Ok(rate)
        }
        Drainer::Pgbench {
            pgbench,
            clients,
            batch,
        } => {
            // Enough rounds for every job; a claim that meets only jobs locked by other
            // clients takes fewer, so the rate counts the jobs done, not the rounds.
            let rounds = jobs.div_ceil(clients * *batch as usize);
            let script = raw::drain_script();
            let variables = [("batch", batch.to_string())];
            let run = pgbench
                .run(fresh.database.url(), &script, *clients, rounds, &variables)
                .await?;
            let done: i64 =
                sqlx::query_scalar("SELECT count(*) FROM jobs_queue WHERE state = 'done'")
                    .fetch_one(&fresh.pool)
                    .await?;
            Ok(done as f64 / run.seconds)
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
