//! One job per transaction, next to a business row, vs the same transaction with a plain insert
//! (from Rust and, where it is installed, from pgbench); and, to show what announcing costs by
//! itself, with a plain insert and a `pg_notify`.

use std::time::{Duration, Instant};

use sqlx::{Acquire, PgPool};

use crate::kinds::noop;
use crate::measure::Fresh;
use crate::options::Options;
use crate::pgbench::Pgbench;
use crate::raw;
use crate::report::Report;

/// What a measured transaction writes next to its business row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Write {
    /// A job, through the framework.
    Framework,
    /// A plain insert of a job row: the target's ceiling.
    PlainInsert,
    /// The plain insert and a `pg_notify` in the same transaction: what announcing ready work
    /// costs by itself.
    InsertAndNotify,
}

/// Who runs the measured transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// This process, through sqlx, writing as given.
    Rust(Write),
    /// pgbench clients, writing as [`Write::PlainInsert`]: the check on the Rust ceiling.
    Pgbench,
}

/// Blocks per side in one run, sides alternating block by block: at one connection each
/// transaction waits for its own flush, whose time drifts over seconds, so that one block per
/// side would measure the drift as much as the side.
pub const ROUNDS: usize = 5;

pub async fn run(options: &Options, report: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    let pgbench = Pgbench::find();
    for &connections in &options.enqueue_connections {
        measure_at(options, connections, pgbench.as_ref(), report).await?;
    }
    Ok(())
}

/// Measures every side with `connections` connections enqueueing at once, and reports.
async fn measure_at(
    options: &Options,
    connections: usize,
    pgbench: Option<&Pgbench>,
    report: &mut Report,
) -> Result<(), Box<dyn std::error::Error>> {
    // Every side, in the order of the first run; each run starts one further.
    let mut sides = vec![
        Side::Rust(Write::Framework),
        Side::Rust(Write::PlainInsert),
        Side::Rust(Write::InsertAndNotify),
    ];
    if pgbench.is_some() {
        sides.push(Side::Pgbench);
    }
    let per_block = (options.single_enqueues / connections / ROUNDS).max(1);
    let mut rates = vec![Vec::new(); sides.len()];
    for run in 0..options.runs {
        let fresh = Fresh::new(connections as u32 + 1).await?;
        sqlx::query("CREATE TABLE business (id bigserial PRIMARY KEY, note text NOT NULL)")
            .execute(&fresh.pool)
            .await?;
        fresh.vacuum().await?;
        let mut times = vec![Duration::ZERO; sides.len()];
        let mut transactions = vec![0u64; sides.len()];
        let mut order: Vec<usize> = (0..sides.len()).collect();
        order.rotate_left(run % sides.len());
        for _ in 0..ROUNDS {
            for &slot in &order {
                let (done, time) = match (sides[slot], pgbench) {
                    (Side::Pgbench, Some(pgbench)) => {
                        let variables = [("payload", r#"{"n": 1}"#.to_string())];
                        let script = raw::enqueue_script();
                        let url = fresh.database.url();
                        let run = pgbench
                            .run(url, &script, connections, per_block, &variables)
                            .await?;
                        (run.transactions, Duration::from_secs_f64(run.seconds))
                    }
                    (Side::Rust(write), _) => (
                        (connections * per_block) as u64,
                        measure(&fresh.pool, connections, per_block, write).await?,
                    ),
                    (Side::Pgbench, None) => {
                        unreachable!("a pgbench side only when pgbench is found")
                    }
                };
                transactions[slot] += done;
                times[slot] += time;
            }
            order.rotate_left(1);
        }
        for (slot, (done, time)) in transactions.into_iter().zip(times).enumerate() {
            rates[slot].push(done as f64 / time.as_secs_f64());
        }
    }
    let name = |what: &str| format!("enqueue, 1 job per tx, {connections} conn.{what}");
    let (framework, ceiling, notifying) = (&rates[0], &rates[1], &rates[2]);
    report.ratio(&name(""), framework, ceiling, "tx/s", ">= 0.85");
    report.ratio(
        &name(", vs plain insert + pg_notify"),
        framework,
        notifying,
        "tx/s",
        "(information)",
    );
    report.ratio(
        &format!("plain insert + pg_notify vs plain insert, {connections} conn."),
        notifying,
        ceiling,
        "tx/s",
        "(information: the price of NOTIFY)",
    );
    if let Some(pgbench_rates) = rates.get(3) {
        report.ratio(
            &name(", vs pgbench"),
            framework,
            pgbench_rates,
            "tx/s",
            ">= 0.85",
        );
        report.ratio(
            &format!("plain insert (Rust) vs pgbench, {connections} conn."),
            ceiling,
            pgbench_rates,
            "tx/s",
            "(information: the Rust ceiling itself)",
        );
    }
    Ok(())
}

/// Which side runs first alternates between runs: `true` is the framework.
pub fn order(run: usize) -> [bool; 2] {
    if run.is_multiple_of(2) {
        [true, false]
    } else {
        [false, true]
    }
}

/// Runs `per_connection` transactions writing as `write` on each of `connections` connections
/// at once; returns the time they took.
async fn measure(
    pool: &PgPool,
    connections: usize,
    per_connection: usize,
    write: Write,
) -> Result<Duration, Box<dyn std::error::Error>> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for connection in 0..connections {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            // One connection per client for the whole run, as pgbench's clients hold theirs:
            // taking one from the pool for each transaction would add the pool's check.
            let mut conn = pool.acquire().await?;
            for n in 0..per_connection {
                let id = (connection * per_connection + n) as i64;
                let mut tx = conn.begin().await?;
                sqlx::query(raw::INSERT_BUSINESS_ROW)
                    .execute(&mut *tx)
                    .await?;
                let payload = || sqlx::types::Json(serde_json::json!({ "n": id }));
                match write {
                    Write::Framework => {
                        noop::enqueue_in(&mut tx, id)
                            .await
                            .map_err(|error| sqlx::Error::Protocol(error.to_string()))?;
                    }
                    Write::PlainInsert => {
                        sqlx::query(raw::INSERT_ONE)
                            .bind(payload())
                            .execute(&mut *tx)
                            .await?;
                    }
                    Write::InsertAndNotify => {
                        sqlx::query(raw::INSERT_ONE_AND_NOTIFY)
                            .bind(payload())
                            .execute(&mut *tx)
                            .await?;
                    }
                }
                tx.commit().await?;
            }
            Ok::<_, sqlx::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(started.elapsed())
}
