//! Pickup latency: from the call to enqueue until the handler starts, with idle workers, next to
//! the same chain in raw SQL (insert and notify; listen, claim) measured in the same run. At
//! idle every hop waits for a process to wake up, so the raw chain is the floor this machine
//! allows.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobs::Worker;
use sqlx::PgPool;

use crate::kinds::{latency_probe, StartTimes};
use crate::measure::{quantile, spread, Fresh};
use crate::options::Options;
use crate::raw;
use crate::report::Report;

/// p50 and p99 of one run, in ms.
struct Quantiles {
    p50: f64,
    p99: f64,
}

pub async fn run(options: &Options, report: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    let (mut framework, mut floor) = (Vec::new(), Vec::new());
    for _ in 0..options.runs {
        // As many connections as the worker can use (its build warns otherwise, and waiting for
        // a connection would be measured as pickup latency), and the raw loop's two.
        let fresh = Fresh::new(32).await?;
        framework.push(framework_pickups(&fresh.pool, options).await?);
        floor.push(raw_pickups(&fresh.pool, options).await?);
    }
    let p50s = |runs: &[Quantiles]| runs.iter().map(|run| run.p50).collect::<Vec<_>>();
    let p99s = |runs: &[Quantiles]| runs.iter().map(|run| run.p99).collect::<Vec<_>>();
    let workload = format!(
        "pickup latency, {} jobs {} ms apart",
        options.latency_jobs, options.latency_gap_ms
    );
    for (name, framework, floor, target) in [
        ("p50", p50s(&framework), p50s(&floor), "p50 < 2 ms"),
        ("p99", p99s(&framework), p99s(&floor), "p99 < 6 ms"),
    ] {
        let (median, min, max) = spread(&framework);
        let ratios: Vec<f64> = framework.iter().zip(&floor).map(|(f, r)| f / r).collect();
        report.line(
            &format!("{workload}, {name}"),
            format!("{median:.2} ms [{min:.2}, {max:.2}]"),
            format!("raw {:.2} ms", spread(&floor).0),
            format!("{:.2}x the raw chain", spread(&ratios).0),
            target,
        );
    }
    Ok(())
}

/// Enqueues probes through the framework to an idle worker.
async fn framework_pickups(
    pool: &PgPool,
    options: &Options,
) -> Result<Quantiles, Box<dyn std::error::Error>> {
    let starts = Arc::new(StartTimes::default());
    let worker = Worker::builder(pool.clone())
        .kinds(["latency_probe"])
        .shared_state(Arc::clone(&starts))
        .build()?
        .start();
    let enqueue = |seq| async move { latency_probe::enqueue(pool, seq).await.map(|_| ()) };
    let quantiles = pickups(&starts, options, enqueue).await;
    worker.shutdown().await?;
    quantiles
}

/// Enqueues probes with a plain insert and notify to the raw pickup loop.
async fn raw_pickups(
    pool: &PgPool,
    options: &Options,
) -> Result<Quantiles, Box<dyn std::error::Error>> {
    let starts = Arc::new(StartTimes::default());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let picker = tokio::spawn(raw::pickup_loop(pool.clone(), Arc::clone(&starts), stopped));
    let enqueue = |seq: i64| async move {
        sqlx::query(raw::INSERT_PROBE)
            .bind(seq)
            .execute(pool)
            .await
            .map(|_| ())
    };
    let quantiles = pickups(&starts, options, enqueue).await;
    let _ = stop.send(true);
    picker.await??;
    quantiles
}

/// Warms up with one probe, then enqueues the measured ones a gap apart and reads each one's
/// time from the call to enqueue until `starts` has it.
async fn pickups<E, F, Error>(
    starts: &StartTimes,
    options: &Options,
    enqueue: E,
) -> Result<Quantiles, Box<dyn std::error::Error>>
where
    E: Fn(i64) -> F,
    F: Future<Output = Result<(), Error>>,
    Error: std::error::Error + 'static,
{
    // Until one probe got through, the listening connection may not be open yet.
    enqueue(-1).await?;
    wait_for_starts(starts, 1).await?;
    starts.times.lock().map_err(|_| "poisoned")?.clear();

    let mut enqueued_at = HashMap::new();
    for seq in 0..options.latency_jobs as i64 {
        enqueued_at.insert(seq, Instant::now());
        enqueue(seq).await?;
        tokio::time::sleep(Duration::from_millis(options.latency_gap_ms)).await;
    }
    wait_for_starts(starts, options.latency_jobs).await?;
    let started = starts.times.lock().map_err(|_| "poisoned")?;
    let latencies: Vec<f64> = enqueued_at
        .iter()
        .map(|(seq, at)| (started[seq] - *at).as_secs_f64() * 1000.0)
        .collect();
    Ok(Quantiles {
        p50: quantile(&latencies, 0.5),
        p99: quantile(&latencies, 0.99),
    })
}

async fn wait_for_starts(starts: &StartTimes, count: usize) -> Result<(), String> {
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let seen = starts.times.lock().map_err(|_| "poisoned")?.len();
        if seen >= count {
            return Ok(());
        }
        if Instant::now() > give_up {
            return Err(format!("only {seen} of {count} jobs started within 60 s"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
