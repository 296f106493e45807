//! One job per transaction, next to a business row, vs the same transaction with a plain insert;
//! and, to show what announcing costs by itself, with a plain insert and a `pg_notify`.

use std::time::Instant;

use sqlx::PgPool;

use crate::kinds::noop;
use crate::measure::Fresh;
use crate::options::Options;
use crate::raw;
use crate::report::Report;

/// What a measured transaction writes next to its business row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// A job, through the framework.
    Framework,
    /// A plain insert of a job row: the target's ceiling.
    PlainInsert,
    /// The plain insert and a `pg_notify` in the same transaction: what announcing ready work
    /// costs by itself.
    InsertAndNotify,
}

/// Every side, in the order of the first run; each run starts one further.
const SIDES: [Side; 3] = [Side::Framework, Side::PlainInsert, Side::InsertAndNotify];

pub async fn run(options: &Options, report: &mut Report) -> Result<(), Box<dyn std::error::Error>> {
    let (mut framework, mut ceiling, mut notifying) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..options.runs {
        let fresh = Fresh::new(options.enqueue_connections as u32 + 1).await?;
        sqlx::query("CREATE TABLE business (id bigserial PRIMARY KEY, note text NOT NULL)")
            .execute(&fresh.pool)
            .await?;
        fresh.vacuum().await?;
        let per_connection = options.single_enqueues / options.enqueue_connections;
        let mut sides = SIDES;
        sides.rotate_left(run % SIDES.len());
        for side in sides {
            let rate = measure(
                &fresh.pool,
                options.enqueue_connections,
                per_connection,
                side,
            )
            .await?;
            match side {
                Side::Framework => framework.push(rate),
                Side::PlainInsert => ceiling.push(rate),
                Side::InsertAndNotify => notifying.push(rate),
            }
        }
    }
    report.ratio(
        "enqueue, 1 job per tx",
        &framework,
        &ceiling,
        "tx/s",
        ">= 0.85",
    );
    report.ratio(
        "enqueue, 1 job per tx, vs plain insert + pg_notify",
        &framework,
        &notifying,
        "tx/s",
        "(information)",
    );
    report.ratio(
        "plain insert + pg_notify vs plain insert",
        &notifying,
        &ceiling,
        "tx/s",
        "(information: the price of NOTIFY)",
    );
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

async fn measure(
    pool: &PgPool,
    connections: usize,
    per_connection: usize,
    side: Side,
) -> Result<f64, Box<dyn std::error::Error>> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for connection in 0..connections {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..per_connection {
                let id = (connection * per_connection + n) as i64;
                let mut tx = pool.begin().await?;
                sqlx::query("INSERT INTO business (note) VALUES ('order')")
                    .execute(&mut *tx)
                    .await?;
                let payload = || sqlx::types::Json(serde_json::json!({ "n": id }));
                match side {
                    Side::Framework => {
                        noop::enqueue_in(&mut tx, id)
                            .await
                            .map_err(|error| sqlx::Error::Protocol(error.to_string()))?;
                    }
                    Side::PlainInsert => {
                        sqlx::query(raw::INSERT_ONE)
                            .bind(payload())
                            .execute(&mut *tx)
                            .await?;
                    }
                    Side::InsertAndNotify => {
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
    Ok((connections * per_connection) as f64 / started.elapsed().as_secs_f64())
}
