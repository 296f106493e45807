//! The health numbers' query on a table holding many done rows: printed, never asserted.

use std::time::Instant;

use crate::measure::{insert_ready_noops, quantile, Fresh};
use crate::options::Options;
use crate::report::Report;

const CALLS: usize = 20;

pub async fn run(options: &Options, report: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    let fresh = Fresh::new(2).await?;
    sqlx::query(
        "INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, finished_at)
         SELECT 'noop', 'default', jsonb_build_object('n', n), 'done', 1, 8, now()
         FROM generate_series(1, $1) AS n",
    )
    .bind(options.retained_rows as i64)
    .execute(&fresh.pool)
    .await?;
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
