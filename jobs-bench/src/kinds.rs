//! The job kinds the benchmark runs.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use jobs::{job, JobResult, State};

/// Does nothing: measures the framework's own cost.
#[job]
pub async fn noop(n: i64) -> JobResult {
    let _ = n;
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
