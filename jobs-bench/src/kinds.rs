//! The job kinds the benchmark runs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use jobs::{job, JobResult, State};

/// Runs of `noop` in this process, so that a drain can be followed without querying the
/// database it measures.
pub static NOOP_RUNS: AtomicU64 = AtomicU64::new(0);

/// Does nothing but count itself: measures the framework's own cost.
#[job]
pub async fn noop(n: i64) -> JobResult {
    let _ = n;
    NOOP_RUNS.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Does what [`noop`] does (its runs count as `noop`'s), for tenant `tenant`: its jobs are
/// claimed round-robin across tenants.
#[job(fair_key = "<tenant>")]
pub async fn fair_noop(tenant: i64, n: i64) -> JobResult {
    let _ = (tenant, n);
    NOOP_RUNS.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Does what [`noop`] does (its runs count as `noop`'s), for merchant `merchant`, with at most
/// 16 running per merchant: a per-key limit a drain at concurrency 16 never reaches.
#[job(limit_key = "<merchant>", max_running_per_key = 16)]
pub async fn keyed_noop(merchant: i64, n: i64) -> JobResult {
    let _ = (merchant, n);
    NOOP_RUNS.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Records when each job started, for the latency workload.
#[derive(Default)]
pub struct StartTimes {
    /// Start time by job sequence number.
    pub times: Mutex<HashMap<i64, Instant>>,
}

/// Notes its start time.
#[job(queue = "latency")]
pub async fn latency_probe(starts: State<StartTimes>, seq: i64) -> JobResult {
    let now = Instant::now();
    starts
        .times
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(seq, now);
    Ok(())
}

/// Counts completed jobs in memory, so a workload can follow throughput without querying.
#[derive(Default)]
pub struct Completions {
    /// Jobs completed so far.
    pub count: std::sync::atomic::AtomicU64,
}

/// Does nothing but count itself.
#[job]
pub async fn counted(completions: State<Completions>, n: i64) -> JobResult {
    let _ = n;
    completions
        .count
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}
