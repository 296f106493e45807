//! Typed checks of what a test enqueued: [`enqueued`], [`assert_enqueued`],
//! [`assert_none_enqueued`] and [`assert_nothing_enqueued`].
//!
//! They read the jobs waiting to run (ready now or scheduled for later) on the connection they
//! are given, so a test can look inside its own open transaction (`&mut *tx`) before it commits
//! or rolls back, or at what is committed (`&mut *pool.acquire().await?`).

use std::fmt::Write as _;

use jobs_core::{JobId, JobKind};
use sqlx::PgConnection;

use crate::store::testing::{waiting_jobs, WaitingJob};

/// Why [`enqueued`] could not list the jobs of a kind.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnqueuedError {
    /// The database refused the query.
    #[error("could not list the enqueued jobs: {0}")]
    Database(#[from] sqlx::Error),
    /// A job's payload does not decode into its kind's arguments: it was written by other code
    /// than the kind's (another version of it, or by hand).
    #[error("job {id} of kind `{kind}` has a payload that does not decode into the kind's arguments: {message}")]
    Undecodable {
        /// The job's id.
        id: JobId,
        /// Its kind.
        kind: &'static str,
        /// The decoder's message.
        message: String,
    },
    /// The arguments a test expects cannot be encoded as JSON.
    #[error("the expected arguments of kind `{kind}` cannot be encoded as JSON: {message}")]
    Unencodable {
        /// The kind.
        kind: &'static str,
        /// The encoder's message.
        message: String,
    },
}

/// The arguments of the jobs of kind `K` waiting to run (ready now or scheduled for later), as
/// `conn` sees them, in the order they were enqueued.
///
/// ```no_run
/// # mod send_receipt { // What `#[job] async fn send_receipt(order_id: i64)` generates.
/// #     #[derive(serde::Serialize, serde::Deserialize)]
/// #     pub struct Args { pub order_id: i64 }
/// #     pub struct Job;
/// #     impl jobs_core::JobKind for Job {
/// #         const NAME: &'static str = "send_receipt";
/// #         type Args = Args;
/// #         type Output = ();
/// #         const OPTIONS: jobs_core::JobOptions = jobs_core::JobOptions::DEFAULT;
/// #     }
/// #     pub async fn enqueue_in(
/// #         conn: &mut sqlx::PgConnection,
/// #         order_id: i64,
/// #     ) -> Result<jobs_postgres::Enqueued, jobs_postgres::EnqueueError> {
/// #         jobs_postgres::EnqueueBuilder::new::<Job>(&Args { order_id }).enqueue_in(conn).await
/// #     }
/// # }
/// # async fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use jobs_postgres::testing::enqueued;
///
/// let mut tx = pool.begin().await?;
/// send_receipt::enqueue_in(&mut tx, 1042).await?;
/// let receipts = enqueued::<send_receipt::Job>(&mut tx).await?;
/// assert_eq!(receipts.len(), 1);
/// assert_eq!(receipts[0].order_id, 1042);
/// # Ok(())
/// # }
/// ```
pub async fn enqueued<K: JobKind>(conn: &mut PgConnection) -> Result<Vec<K::Args>, EnqueuedError> {
    let jobs = waiting_jobs(conn, Some(K::NAME)).await?;
    jobs.iter().map(decode::<K>).collect()
}

/// Panics unless a job of kind `K` with arguments equal to `args` waits to run (ready now or
/// scheduled for later), as `conn` sees it; the message lists every job waiting instead.
/// Arguments are compared as the JSON they are stored as, so `K::Args` needs no `PartialEq`.
///
/// Also panics, saying why, when the jobs cannot be read.
///
/// ```no_run
/// # mod send_receipt { // What `#[job] async fn send_receipt(order_id: i64)` generates.
/// #     #[derive(serde::Serialize, serde::Deserialize)]
/// #     pub struct Args { pub order_id: i64 }
/// #     pub struct Job;
/// #     impl jobs_core::JobKind for Job {
/// #         const NAME: &'static str = "send_receipt";
/// #         type Args = Args;
/// #         type Output = ();
/// #         const OPTIONS: jobs_core::JobOptions = jobs_core::JobOptions::DEFAULT;
/// #     }
/// #     pub async fn enqueue_in(
/// #         conn: &mut sqlx::PgConnection,
/// #         order_id: i64,
/// #     ) -> Result<jobs_postgres::Enqueued, jobs_postgres::EnqueueError> {
/// #         jobs_postgres::EnqueueBuilder::new::<Job>(&Args { order_id }).enqueue_in(conn).await
/// #     }
/// # }
/// # async fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use jobs_postgres::testing::assert_enqueued;
///
/// let mut tx = pool.begin().await?;
/// send_receipt::enqueue_in(&mut tx, 1042).await?;
/// assert_enqueued::<send_receipt::Job>(&mut tx, &send_receipt::Args { order_id: 1042 }).await;
/// # Ok(())
/// # }
/// ```
pub async fn assert_enqueued<K: JobKind>(conn: &mut PgConnection, args: &K::Args) {
    let expected = match serde_json::to_value(args) {
        Ok(expected) => expected,
        Err(error) => panic!(
            "{}",
            EnqueuedError::Unencodable {
                kind: K::NAME,
                message: error.to_string(),
            }
        ),
    };
    let waiting = read_waiting(conn, None).await;
    for job in waiting.iter().filter(|job| job.kind == K::NAME) {
        let found = decode::<K>(job).and_then(|found| {
            serde_json::to_value(found).map_err(|error| EnqueuedError::Unencodable {
                kind: K::NAME,
                message: error.to_string(),
            })
        });
        match found {
            Ok(found) if found == expected => return,
            Ok(_) => {}
            Err(error) => panic!("{error}"),
        }
    }
    panic!(
        "expected a `{}` job with arguments {expected} waiting to run, but none was enqueued with those arguments; {}",
        K::NAME,
        describe(&waiting)
    );
}

/// Panics when a job of kind `K` waits to run (ready now or scheduled for later), as `conn`
/// sees it; the message lists them.
///
/// ```no_run
/// # mod send_receipt { // What `#[job] async fn send_receipt(order_id: i64)` generates.
/// #     #[derive(serde::Serialize, serde::Deserialize)]
/// #     pub struct Args { pub order_id: i64 }
/// #     pub struct Job;
/// #     impl jobs_core::JobKind for Job {
/// #         const NAME: &'static str = "send_receipt";
/// #         type Args = Args;
/// #         type Output = ();
/// #         const OPTIONS: jobs_core::JobOptions = jobs_core::JobOptions::DEFAULT;
/// #     }
/// #     pub async fn enqueue_in(
/// #         conn: &mut sqlx::PgConnection,
/// #         order_id: i64,
/// #     ) -> Result<jobs_postgres::Enqueued, jobs_postgres::EnqueueError> {
/// #         jobs_postgres::EnqueueBuilder::new::<Job>(&Args { order_id }).enqueue_in(conn).await
/// #     }
/// # }
/// # async fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let mut tx = pool.begin().await?;
/// // ... an order that is not paid yet ...
/// jobs_postgres::testing::assert_none_enqueued::<send_receipt::Job>(&mut tx).await;
/// # Ok(())
/// # }
/// ```
pub async fn assert_none_enqueued<K: JobKind>(conn: &mut PgConnection) {
    let waiting = read_waiting(conn, Some(K::NAME)).await;
    if !waiting.is_empty() {
        panic!(
            "expected no `{}` job waiting to run; {}",
            K::NAME,
            describe(&waiting)
        );
    }
}

/// Panics when any job waits to run (ready now or scheduled for later), as `conn` sees it; the
/// message lists them.
///
/// ```no_run
/// # async fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let mut tx = pool.begin().await?;
/// // ... work that must not enqueue anything ...
/// jobs_postgres::testing::assert_nothing_enqueued(&mut tx).await;
/// # Ok(())
/// # }
/// ```
pub async fn assert_nothing_enqueued(conn: &mut PgConnection) {
    let waiting = read_waiting(conn, None).await;
    if !waiting.is_empty() {
        panic!("expected no job waiting to run; {}", describe(&waiting));
    }
}

/// The jobs waiting, or a panic saying why they could not be read.
async fn read_waiting(conn: &mut PgConnection, kind: Option<&str>) -> Vec<WaitingJob> {
    match waiting_jobs(conn, kind).await {
        Ok(waiting) => waiting,
        Err(error) => panic!("{}", EnqueuedError::Database(error)),
    }
}

/// The arguments of `job`, a job of kind `K`.
fn decode<K: JobKind>(job: &WaitingJob) -> Result<K::Args, EnqueuedError> {
    serde_json::from_str(&job.payload).map_err(|error| EnqueuedError::Undecodable {
        id: job.id,
        kind: K::NAME,
        message: error.to_string(),
    })
}

/// "no job waits to run", or the jobs waiting, one a line: id, kind, queue, when due, arguments.
fn describe(waiting: &[WaitingJob]) -> String {
    if waiting.is_empty() {
        return String::from("no job waits to run");
    }
    let mut text = format!("{} waiting to run:", jobs_waiting(waiting.len()));
    for job in waiting {
        let _ = write!(
            text,
            "\n  job {} `{}` on queue `{}`, priority {}, due {}: {}",
            job.id,
            job.kind,
            job.queue,
            job.priority,
            job.run_at.format("%Y-%m-%d %H:%M:%S%.3f UTC"),
            job.payload
        );
    }
    text
}

/// "1 job is" or "N jobs are".
fn jobs_waiting(count: usize) -> String {
    if count == 1 {
        String::from("1 job is")
    } else {
        format!("{count} jobs are")
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;

    fn waiting(id: JobId, kind: &str, payload: &str) -> WaitingJob {
        WaitingJob {
            id,
            kind: kind.to_owned(),
            queue: String::from("default"),
            priority: 0,
            run_at: Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap(),
            payload: payload.to_owned(),
        }
    }

    #[test]
    fn descriptions_list_every_job_waiting() {
        assert_eq!(describe(&[]), "no job waits to run");
        assert_eq!(
            describe(&[
                waiting(3, "send_receipt", r#"{"order_id": 7}"#),
                waiting(4, "welcome", r#"{"user_id": 1}"#)
            ]),
            "2 jobs are waiting to run:\n  job 3 `send_receipt` on queue `default`, priority 0, due 2026-01-02 03:04:05.000 UTC: {\"order_id\": 7}\n  job 4 `welcome` on queue `default`, priority 0, due 2026-01-02 03:04:05.000 UTC: {\"user_id\": 1}"
        );
    }
}
