//! The scaffolding the examples share, apart from what they show: logs, a scratch database, and
//! waiting for the jobs to settle. An application has its own logging and its own database; a
//! real worker runs until it is told to stop.

use std::error::Error;
use std::time::{Duration, Instant};

use jobs::postgres::testing::TestDatabase;
use sqlx::PgPool;

/// Logs as `RUST_LOG` says; nothing when it is not set.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "off".into()),
        )
        .init();
}

/// An empty scratch database on the PostgreSQL at `DATABASE_URL` (else the local one), dropped
/// when the returned value is, and a pool of `connections` to it.
pub async fn scratch_database(connections: u32) -> Result<(TestDatabase, PgPool), Box<dyn Error>> {
    let database = TestDatabase::create().await?;
    println!("Using scratch database `{}`", database.name());
    let pool = database.pool(connections).await?;
    Ok((database, pool))
}

/// Waits until `jobs` jobs exist and none of them is ready or running (retries included);
/// fails after 60 s.
pub async fn wait_until_settled(pool: &PgPool, jobs: i64) -> Result<(), Box<dyn Error>> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (unsettled, all): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE state IN ('ready', 'running')), count(*)
             FROM jobs_queue",
        )
        .fetch_one(pool)
        .await?;
        if unsettled == 0 && all == jobs {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("jobs did not settle within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
