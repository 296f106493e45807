//! Bulk enqueue by `COPY`, on a connection of its own that is closed unless the whole exchange
//! completed.
//!
//! `COPY` writes many rows at a fraction of a multi-row insert's cost, but sqlx 0.8 cannot
//! interrupt it cleanly: a `COPY` whose future is dropped (a timeout, a cancelled request) leaves
//! replies on the connection that sqlx does not know it owes, and the connection's next statement
//! would read them as its own results. So `COPY` runs only where the framework owns the
//! connection, never on the caller's (`enqueue_many_in` inserts), and that connection goes back
//! to the pool only when the transaction has committed; otherwise it is closed.

use std::ops::{Deref, DerefMut};

use jobs_core::{JobId, NewJob, RunAt};
use sqlx::pool::PoolConnection;
use sqlx::{Acquire, PgConnection, PgPool, Postgres};

use crate::enqueue::EnqueueError;
use crate::store::copy::copy_uniform_jobs;
use crate::store::enqueue::same_shape;

/// The fewest jobs written by `COPY`: it takes five round trips (begin, reserve the ids, start
/// the copy, end it, commit) where a multi-row insert takes one, which pays only for large
/// bulks.
pub const COPY_MIN_JOBS: usize = 1_000;

/// The shape `jobs` share when they may be written by `COPY`: at least [`COPY_MIN_JOBS`] of
/// them, ready at once, without prerequisites, alike but for their payloads (see
/// [`same_shape`]).
pub(crate) fn copyable(jobs: &[NewJob]) -> Option<&NewJob> {
    let first = jobs.first()?;
    let alike = jobs
        .iter()
        .all(|job| job.after.is_empty() && same_shape(first, job));
    (jobs.len() >= COPY_MIN_JOBS && first.run_at == RunAt::Now && alike).then_some(first)
}

/// Writes `jobs`, checked and all shaped like `shape`, by `COPY` in a transaction of their own on
/// a connection from `pool`. Returns their ids in input order, or `None` when the database
/// refused the way itself (see [`refuses_copy`]): nothing was written, and the caller writes
/// them by insert. Any other error is returned as it is, nothing retried.
pub(crate) async fn copy_jobs(
    pool: &PgPool,
    shape: &NewJob,
    jobs: &[NewJob],
) -> Result<Option<Vec<JobId>>, EnqueueError> {
    let mut conn = ClosedUnlessReleased::new(pool.acquire().await?);
    match copy_and_commit(&mut conn, shape, jobs).await {
        Ok(ids) => {
            conn.release();
            Ok(Some(ids))
        }
        Err(Failure::BeforeCommit(error)) if refuses_copy(&error) => {
            tracing::debug!(%error, "bulk enqueue by COPY refused; inserting instead");
            // The refusal was an error reply that sqlx read to its end: the connection is in
            // step.
            conn.release();
            Ok(None)
        }
        Err(Failure::BeforeCommit(error) | Failure::AtCommit(error)) => Err(error.into()),
    }
}

/// Whether `error` refuses the `COPY` way itself, which an insert of the same jobs may pass: no
/// privilege to reserve ids from the sequence (`42501`), or `COPY` not supported on the table
/// (`0A000`: row-level security). A timeout, a cancel, a conflict or a server going away is the
/// caller's to see: inserting the jobs anyway would hide it, and take as long again.
fn refuses_copy(error: &sqlx::Error) -> bool {
    let code = match error {
        sqlx::Error::Database(error) => error.code(),
        _ => None,
    };
    matches!(code.as_deref(), Some("42501" | "0A000"))
}

/// Where a `COPY` transaction failed: before its commit was sent, nothing was written; at the
/// commit, the outcome is unknown, as for any commit whose reply is lost.
enum Failure {
    BeforeCommit(sqlx::Error),
    AtCommit(sqlx::Error),
}

async fn copy_and_commit(
    conn: &mut PgConnection,
    shape: &NewJob,
    jobs: &[NewJob],
) -> Result<Vec<JobId>, Failure> {
    let mut tx = conn.begin().await.map_err(Failure::BeforeCommit)?;
    let ids = copy_uniform_jobs(&mut tx, shape, jobs)
        .await
        .map_err(Failure::BeforeCommit)?;
    tx.commit().await.map_err(Failure::AtCommit)?;
    Ok(ids)
}

/// A pool connection that is closed when dropped, instead of going back to the pool, unless
/// [`release`](Self::release)d: dropped mid-`COPY`, it may be out of step with its server.
struct ClosedUnlessReleased {
    conn: PoolConnection<Postgres>,
    released: bool,
}

impl ClosedUnlessReleased {
    fn new(conn: PoolConnection<Postgres>) -> Self {
        Self {
            conn,
            released: false,
        }
    }

    /// Returns the connection to the pool: every exchange on it has completed.
    fn release(mut self) {
        self.released = true;
    }
}

impl Drop for ClosedUnlessReleased {
    fn drop(&mut self) {
        if !self.released {
            self.conn.close_on_drop();
        }
    }
}

impl Deref for ClosedUnlessReleased {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        &self.conn
    }
}

impl DerefMut for ClosedUnlessReleased {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.conn
    }
}
