//! Bulk enqueue of many jobs, in the caller's transaction (one multi-row insert) and on their own
//! (by `COPY`), vs a raw multi-row `INSERT` of the same rows, and vs a raw `COPY` (the fastest
//! way in, which returns no ids and cannot skip dedupe conflicts).

use std::time::{Duration, Instant};

use jobs::postgres::__private::COPY_MIN_JOBS;
use sqlx::{PgConnection, PgPool};

use crate::kinds::noop;
use crate::measure::Fresh;
use crate::options::Options;
use crate::raw;
use crate::report::Report;

/// Bulk inserts per side in one run, alternating sides: one statement of 10,000 rows takes about
/// a tenth of a second, too short for one to stand for the run.
pub const ROUNDS: usize = 15;

/// Jobs per side in the unmeasured first round: as many as the framework's bulk enqueue on its
/// own needs to write by `COPY`.
const WARM_UP_JOBS: usize = COPY_MIN_JOBS;

/// The ways in that one run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// `enqueue_many_in` on the caller's connection: a multi-row insert.
    InTransaction,
    /// `enqueue_many` on the pool: `COPY` on a connection of its own.
    OnItsOwn,
    /// The raw multi-row `INSERT`.
    RawInsert,
    /// The raw `COPY`.
    RawCopy,
}

const SIDES: [Side; 4] = [
    Side::InTransaction,
    Side::OnItsOwn,
    Side::RawInsert,
    Side::RawCopy,
];

pub async fn run(options: &Options, report: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    let mut rates = vec![Vec::new(); SIDES.len()];
    for run in 0..options.runs {
        let fresh = Fresh::new(2).await?;
        fresh.vacuum().await?;
        let mut conn = fresh.pool.acquire().await?;
        // One unmeasured round per side first, large enough to take the same path as the
        // measured ones: statements prepared, caches warm, as in a long-running application.
        for side in SIDES {
            write(side, &fresh.pool, &mut conn, WARM_UP_JOBS).await?;
        }
        let mut times = [Duration::ZERO; SIDES.len()];
        let mut order: Vec<usize> = (0..SIDES.len()).collect();
        order.rotate_left(run % SIDES.len());
        for _ in 0..ROUNDS {
            for &slot in &order {
                let started = Instant::now();
                write(SIDES[slot], &fresh.pool, &mut conn, options.bulk_jobs).await?;
                times[slot] += started.elapsed();
            }
            order.rotate_left(1);
        }
        for (slot, time) in times.into_iter().enumerate() {
            rates[slot].push((ROUNDS * options.bulk_jobs) as f64 / time.as_secs_f64());
        }
    }
    let [in_transaction, on_its_own, raw_insert, raw_copy] = [0, 1, 2, 3].map(|slot| &rates[slot]);
    let jobs = options.bulk_jobs;
    report.ratio(
        &format!("bulk enqueue {jobs} jobs in a transaction vs multi-row INSERT"),
        in_transaction,
        raw_insert,
        "jobs/s",
        ">= 0.8",
    );
    report.ratio(
        &format!("bulk enqueue {jobs} jobs in a transaction vs COPY"),
        in_transaction,
        raw_copy,
        "jobs/s",
        "(information: the caller's connection never copies)",
    );
    // Below the threshold the bulk on its own is inserted too: the row says so.
    let way = if jobs >= COPY_MIN_JOBS {
        "by COPY"
    } else {
        "inserted, below the COPY threshold"
    };
    report.ratio(
        &format!("bulk enqueue {jobs} jobs on their own ({way}) vs COPY"),
        on_its_own,
        raw_copy,
        "jobs/s",
        ">= 0.8 (#18; COPY returns no ids)",
    );
    Ok(())
}

/// Writes `jobs` no-op jobs as `side` does, on `conn` or (on their own) on `pool`.
async fn write(
    side: Side,
    pool: &PgPool,
    conn: &mut PgConnection,
    jobs: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let args = (0..jobs as i64).map(|n| noop::Args { n });
    match side {
        Side::InTransaction => drop(noop::enqueue_many_in(conn, args).await?),
        Side::OnItsOwn => drop(noop::enqueue_many(pool, args).await?),
        Side::RawInsert => raw::insert_jobs(conn, jobs).await?,
        Side::RawCopy => raw::copy_jobs(conn, jobs).await?,
    }
    Ok(())
}
