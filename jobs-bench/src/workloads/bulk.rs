//! Bulk enqueue of many jobs in one round trip vs a raw multi-row `INSERT` of the same rows (the
//! target's ceiling), and vs `COPY` (the fastest way in, which returns no ids and cannot skip
//! dedupe conflicts).

use std::time::{Duration, Instant};

use crate::kinds::noop;
use crate::measure::Fresh;
use crate::options::Options;
use crate::raw;
use crate::report::Report;
use crate::workloads::enqueue::order;

/// Bulk inserts per side in one run, alternating sides: one statement of 10,000 rows takes about
/// a tenth of a second, too short for one to stand for the run.
const ROUNDS: usize = 5;

pub async fn run(options: &Options, report: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    let (mut framework, mut ceiling, mut copy) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..options.runs {
        let fresh = Fresh::new(2).await?;
        fresh.vacuum().await?;
        let mut conn = fresh.pool.acquire().await?;
        // One unmeasured round per side first: statements prepared, caches warm, as in a
        // long-running application.
        noop::enqueue_many_in(&mut conn, (0..100).map(|n| noop::Args { n })).await?;
        raw::copy_jobs(&mut conn, 100).await?;
        raw::insert_jobs(&mut conn, 100).await?;
        let (mut framework_time, mut ceiling_time, mut copy_time) =
            (Duration::ZERO, Duration::ZERO, Duration::ZERO);
        for round in 0..ROUNDS {
            let started = Instant::now();
            raw::copy_jobs(&mut conn, options.bulk_jobs).await?;
            copy_time += started.elapsed();
            for side in order(run + round) {
                let started = Instant::now();
                if side {
                    let args = (0..options.bulk_jobs as i64).map(|n| noop::Args { n });
                    noop::enqueue_many_in(&mut conn, args).await?;
                    framework_time += started.elapsed();
                } else {
                    raw::insert_jobs(&mut conn, options.bulk_jobs).await?;
                    ceiling_time += started.elapsed();
                }
            }
        }
        let rate = |time: Duration| (ROUNDS * options.bulk_jobs) as f64 / time.as_secs_f64();
        framework.push(rate(framework_time));
        ceiling.push(rate(ceiling_time));
        copy.push(rate(copy_time));
    }
    report.ratio(
        &format!(
            "bulk enqueue {} jobs vs multi-row INSERT",
            options.bulk_jobs
        ),
        &framework,
        &ceiling,
        "jobs/s",
        ">= 0.8",
    );
    report.ratio(
        &format!("bulk enqueue {} jobs vs COPY", options.bulk_jobs),
        &framework,
        &copy,
        "jobs/s",
        ">= 0.8 (#18; COPY returns no ids)",
    );
    Ok(())
}
