//! Peak memory of a worker process while it drains: a child process runs the worker and reports
//! its own high-water mark of resident memory.

use std::sync::atomic::Ordering;
use std::time::Duration;

use jobs::postgres::worker::Completion;
use sqlx::postgres::PgPoolOptions;

use crate::kinds::NOOP_RUNS;
use crate::measure::{insert_ready_noops, wait_until_drained, Fresh};
use crate::options::Options;
use crate::report::Report;
use crate::workloads::drain::start_worker;

const CONCURRENCY: usize = 64;
const CHILD_FLAG: &str = "--memory-child";

pub async fn run(options: &Options, report: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    let fresh = Fresh::new(2).await?;
    insert_ready_noops(&fresh.pool, options.drain_jobs).await?;
    fresh.vacuum().await?;
    let output = tokio::process::Command::new(std::env::current_exe()?)
        .args([CHILD_FLAG, fresh.database.url()])
        .output()
        .await?;
    if !output.status.success() {
        return Err(format!(
            "the worker process failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let peak_kb: f64 = String::from_utf8_lossy(&output.stdout).trim().parse()?;
    report.line(
        &format!(
            "worker peak RSS, draining {} jobs at C={CONCURRENCY}",
            options.drain_jobs
        ),
        format!("{:.1} MB", peak_kb / 1024.0),
        String::from("(none)"),
        format!("{:.1} MB", peak_kb / 1024.0),
        "< 60 MB",
    );
    Ok(())
}

/// The child side: drains the database at the given URL, then prints its peak RSS in kB.
pub struct Child {
    url: String,
}

/// Reads the child's arguments, when this process is the child.
pub fn child_from_args() -> Option<Child> {
    let mut args = std::env::args().skip(1);
    (args.next()? == CHILD_FLAG)
        .then(|| args.next())
        .flatten()
        .map(|url| Child { url })
}

impl Child {
    /// Drains, shuts down, prints `VmHWM` in kB.
    pub async fn run(self) -> Result<(), Box<dyn std::error::Error>> {
        let pool = PgPoolOptions::new()
            .max_connections(CONCURRENCY as u32 + 8)
            .connect(&self.url)
            .await?;
        let ready: i64 =
            sqlx::query_scalar("SELECT count(*) FROM jobs_queue WHERE state = 'ready'")
                .fetch_one(&pool)
                .await?;
        let runs = NOOP_RUNS.load(Ordering::Relaxed) + u64::try_from(ready)?;
        let worker = start_worker(&pool, CONCURRENCY, Completion::default())?;
        wait_until_drained(&pool, runs, Duration::from_secs(600)).await?;
        worker.shutdown().await?;
        let status = std::fs::read_to_string("/proc/self/status")?;
        let peak = status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|value| {
                value
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .ok_or("no VmHWM in /proc/self/status")?;
        println!("{peak}");
        Ok(())
    }
}
