//! Pickup latency: from the call to enqueue until the handler starts, with idle workers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobs::Worker;

use crate::kinds::{latency_probe, StartTimes};
use crate::measure::{quantile, spread, Fresh};
use crate::options::Options;
use crate::report::Report;

pub async fn run(options: &Options, report: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    let (mut p50s, mut p99s) = (Vec::new(), Vec::new());
    for _ in 0..options.runs {
        let fresh = Fresh::new(8).await?;
        let starts = Arc::new(StartTimes::default());
        let worker = Worker::builder(fresh.pool.clone())
            .kinds(["latency_probe"])
            .shared_state(Arc::clone(&starts))
            .build()?
            .start();
        // Warm up until the worker has picked up a job (its LISTEN connection is then open).
        latency_probe::enqueue(&fresh.pool, -1).await?;
        wait_for_starts(&starts, 1).await?;
        starts.times.lock().map_err(|_| "poisoned")?.clear();

        let mut enqueued_at = HashMap::new();
        for seq in 0..options.latency_jobs as i64 {
            enqueued_at.insert(seq, Instant::now());
            latency_probe::enqueue(&fresh.pool, seq).await?;
            tokio::time::sleep(Duration::from_millis(options.latency_gap_ms)).await;
        }
        wait_for_starts(&starts, options.latency_jobs).await?;
        worker.shutdown().await;
        let started = starts.times.lock().map_err(|_| "poisoned")?;
        let latencies: Vec<f64> = enqueued_at
            .iter()
            .map(|(seq, at)| (started[seq] - *at).as_secs_f64() * 1000.0)
            .collect();
        p50s.push(quantile(&latencies, 0.5));
        p99s.push(quantile(&latencies, 0.99));
    }
    let (p50, p50_min, p50_max) = spread(&p50s);
    let (p99, p99_min, p99_max) = spread(&p99s);
    report.line(
        &format!(
            "pickup latency, {} jobs {} ms apart",
            options.latency_jobs, options.latency_gap_ms
        ),
        format!("p50 {p50:.2} ms [{p50_min:.2}, {p50_max:.2}]"),
        String::from("(none)"),
        format!("p99 {p99:.2} ms [{p99_min:.2}, {p99_max:.2}]"),
        "p50 < 2 ms, p99 < 6 ms",
    );
    Ok(())
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
