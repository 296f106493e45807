//! Measures `jobs` against the leanest raw SQL doing the same work, on the same database, in the
//! same run, and prints ratios (median of several runs, with min and max).
//!
//! ```sh
//! cargo run --release -p jobs-bench              # every workload, 3 runs each
//! cargo run --release -p jobs-bench -- --quick   # smaller sizes, 1 run: a smoke test
//! cargo run --release -p jobs-bench -- --only drain,latency
//! ```

mod kinds;
mod measure;
mod options;
mod pgbench;
mod raw;
mod report;
mod workloads;

use options::Options;
use report::Report;

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Some(child) = workloads::memory::child_from_args() {
        return child.run().await;
    }
    let options = Options::from_args()?;
    let mut report = Report::new(&options).await?;
    for workload in workloads::ALL {
        if options.wants(workload.name) {
            eprintln!("running {} ...", workload.name);
            (workload.run)(&options, &mut report).await?;
        }
    }
    report.print();
    Ok(())
}
