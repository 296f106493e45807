//! The health numbers' query on a table holding many done rows: printed, never asserted.

use std::time::Instant;

use crate::measure::{insert_done_noops, insert_ready_noops, quantile, Fresh};
use crate::options::Options;
use crate::report::Report;

const CALLS: usize = 20;

pub async fn run(options: &Options, report: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    let fresh = Fresh::new(2).await?;
    insert_done_noops(&fresh.pool, options.retained_rows).await?;
    insert_ready_noops(&fresh.pool, 10_000).await?;
    fresh.vacuum().await?;
    jobs::admin::stats(&fresh.pool).await?;
    let mut millis = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        jobs::admin::stats(&fresh.pool).await?;
        millis.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    report.line(
        &format!(
            "stats query, {} done + 10000 ready rows",
            options.retained_rows
        ),
        format!("p50 {:.2} ms", quantile(&millis, 0.5)),
        String::from("(none)"),
        format!("p90 {:.2} ms over {CALLS} calls", quantile(&millis, 0.9)),
        "printed, not asserted",
    );
    Ok(())
}
