//! Drain rate while another connection holds a transaction open, pinning the xmin horizon, and
//! after it ends.

use std::time::{Duration, Instant};

use std::sync::atomic::Ordering;
use std::sync::Arc;

use jobs::Worker;
use sqlx::Connection;

use crate::kinds::Completions;
use crate::measure::{spread, Fresh};
use crate::options::Options;
use crate::report::Report;

const CONCURRENCY: usize = 16;
const BASELINE_SECS: u64 = 10;
const AFTER_SECS: u64 = 30;
/// Jobs inserted at a time by the feeder.
const BACKLOG: i64 = 50_000;
/// The feeder tops the table up whenever fewer ready jobs than this remain: a few seconds of
/// work at the worker's pace, so that it never runs dry and the rate measured is the worker's,
/// not the feeder's.
const LOW_WATER: i64 = 3 * BACKLOG;

pub async fn run(options: &Options, report: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    let fresh = Fresh::new(CONCURRENCY as u32 + 8).await?;
    insert_ready(&fresh.pool, LOW_WATER + BACKLOG).await?;
    fresh.vacuum().await?;
    // Throughput is counted in memory: polling the table would itself slow the drain down.
    let completions = Arc::new(Completions::default());
    let (stop_feeding, feeding) = tokio::sync::watch::channel(false);
    let feeder = tokio::spawn(feed(
        fresh.pool.clone(),
        Arc::clone(&completions),
        LOW_WATER + BACKLOG,
        feeding,
    ));
    let worker = Worker::builder(fresh.pool.clone())
        .kinds(["counted"])
        .queue("default", CONCURRENCY)
        .shared_state(Arc::clone(&completions))
        .build()?
        .start();
    let done_count = || completions.count.load(Ordering::Relaxed) as i64;

    let hold = Duration::from_secs(options.hold_secs);
    let total = Duration::from_secs(BASELINE_SECS) + hold + Duration::from_secs(AFTER_SECS);
    let started = Instant::now();
    let mut holder: Option<sqlx::PgConnection> = None;
    let mut held_from = None;
    let mut released_at = None;
    // (seconds since start, jobs done per second since the last sample)
    let mut samples: Vec<(f64, f64)> = Vec::new();
    let mut last = (Instant::now(), done_count());
    let mut next_tick = started + Duration::from_secs(1);
    // A feeder that stopped early failed: its error is reported below.
    while started.elapsed() < total && !feeder.is_finished() {
        tokio::time::sleep_until(next_tick.into()).await;
        next_tick += Duration::from_secs(1);
        let now = (Instant::now(), done_count());
        let rate = (now.1 - last.1) as f64 / (now.0 - last.0).as_secs_f64();
        samples.push((started.elapsed().as_secs_f64(), rate));
        last = now;
        let elapsed = started.elapsed();
        if holder.is_none() && held_from.is_none() && elapsed >= Duration::from_secs(BASELINE_SECS)
        {
            let mut conn = sqlx::PgConnection::connect(fresh.database.url()).await?;
            sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ")
                .execute(&mut conn)
                .await?;
            sqlx::query("SELECT count(*) FROM pg_class")
                .execute(&mut conn)
                .await?;
            holder = Some(conn);
            held_from = Some(elapsed.as_secs_f64());
        }
        if let (Some(from), Some(_)) = (held_from, holder.as_ref()) {
            if elapsed.as_secs_f64() >= from + hold.as_secs_f64() {
                if let Some(mut conn) = holder.take() {
                    sqlx::query("COMMIT").execute(&mut conn).await?;
                }
                released_at = Some(elapsed.as_secs_f64());
            }
        }
    }
    stop_feeding.send_replace(true);
    let fed = feeder.await;
    worker.shutdown().await?;
    fed??;

    let held_from = held_from.unwrap_or(f64::MAX);
    let released_at = released_at.unwrap_or(f64::MAX);
    let baseline: Vec<f64> = samples
        .iter()
        .filter(|(at, _)| *at > 2.0 && *at <= held_from)
        .map(|(_, n)| *n)
        .collect();
    let during: Vec<f64> = samples
        .iter()
        .filter(|(at, _)| *at > held_from + 1.0 && *at <= released_at)
        .map(|(_, n)| *n)
        .collect();
    let after: Vec<(f64, f64)> = samples
        .iter()
        .filter(|(at, _)| *at > released_at)
        .copied()
        .collect();
    let (baseline_rate, _, _) = spread(&baseline);
    let (_, during_min, _) = spread(&during);
    let during_end = during.iter().rev().take(5).sum::<f64>() / during.len().clamp(1, 5) as f64;
    let recovered = after
        .windows(3)
        .find(|window| window.iter().all(|(_, n)| *n >= 0.9 * baseline_rate))
        .map(|window| window[0].0 - released_at);
    report.line(
        &format!("held xmin for {} s, C={CONCURRENCY}", options.hold_secs),
        format!("baseline {baseline_rate:.0} jobs/s"),
        String::from("(the same worker before the hold)"),
        format!(
            "lowest second {:.2}x, last 5 s of hold {:.2}x, back to 0.9x {}",
            during_min / baseline_rate,
            during_end / baseline_rate,
            recovered.map_or_else(
                || String::from("not within 30 s"),
                |secs| format!("{secs:.0} s after")
            ),
        ),
        ">= 0.5x throughout; back within 30 s",
    );
    let timeline: Vec<String> = samples
        .iter()
        .map(|(at, n)| format!("{at:.0}s:{n:.0}"))
        .collect();
    report.note(format!(
        "held-xmin timeline (jobs done per second): {}",
        timeline.join(" ")
    ));
    Ok(())
}

/// Keeps at least [`LOW_WATER`] jobs ready until `stop` turns `true`, `inserted` of them so
/// far: inserts [`BACKLOG`] more whenever fewer remain.
async fn feed(
    pool: sqlx::PgPool,
    completions: Arc<Completions>,
    mut inserted: i64,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), sqlx::Error> {
    let mut check = tokio::time::interval(Duration::from_millis(50));
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return Ok(()),
            _ = check.tick() => {}
        }
        let done = completions.count.load(Ordering::Relaxed) as i64;
        if inserted - done < LOW_WATER {
            insert_ready(&pool, BACKLOG).await?;
            inserted += BACKLOG;
        }
    }
}

/// Inserts `count` ready `counted` jobs with plain SQL.
async fn insert_ready(pool: &sqlx::PgPool, count: i64) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts)
         SELECT 'counted', 'default', jsonb_build_object('n', n), 8 FROM generate_series(1, $1) AS n",
    )
    .bind(count)
    .execute(pool)
    .await?;
    Ok(())
}
