//! The worker's seam to the database: one function per operation, typed rows out.

use std::time::Duration;

use jobs_core::{AttemptError, JobId};
use sqlx::{FromRow, PgPool};
use uuid::Uuid;

use crate::sql;

/// A job taken by a worker, with the lease token that fences its outcome.
#[derive(Debug, Clone, FromRow)]
pub struct ClaimedJob {
    /// The job's id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
    /// The encoded arguments.
    pub payload: String,
    /// Which attempt this claim is, starting at 1.
    pub attempts: i32,
    /// Attempts allowed in all.
    pub max_attempts: i32,
    /// The rendered dedupe key, when there is one.
    pub dedupe_key: Option<String>,
    /// The token of this claim's lease.
    pub lease_token: Uuid,
}

/// Whether an outcome was written, or the lease had already been lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// The write happened: the lease still held the job.
    Written,
    /// Nothing was written: another claim or a rescue had taken the job.
    LeaseLost,
}

impl Fenced {
    fn from_rows(rows_affected: u64) -> Self {
        if rows_affected == 0 {
            Fenced::LeaseLost
        } else {
            Fenced::Written
        }
    }
}

/// Claims up to `limit` ready jobs of `kinds` from `queue`, leased for `lease`.
pub async fn claim(
    pool: &PgPool,
    queue: &str,
    kinds: &[&str],
    limit: usize,
    lease: Duration,
) -> Result<Vec<ClaimedJob>, sqlx::Error> {
    sqlx::query_as(sql::CLAIM_JOBS)
        .bind(queue)
        .bind(kinds)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(lease.as_secs_f64())
        .fetch_all(pool)
        .await
}

/// Marks a job done.
pub async fn complete(pool: &PgPool, id: JobId, token: Uuid) -> Result<Fenced, sqlx::Error> {
    let done = sqlx::query(sql::COMPLETE_JOB)
        .bind(id)
        .bind(token)
        .execute(pool)
        .await?;
    Ok(Fenced::from_rows(done.rows_affected()))
}

/// Makes a job ready again after `delay`, keeping the attempt's error.
pub async fn retry(
    pool: &PgPool,
    id: JobId,
    token: Uuid,
    delay: Duration,
    error: &AttemptError,
) -> Result<Fenced, sqlx::Error> {
    let done = sqlx::query(sql::RETRY_JOB)
        .bind(id)
        .bind(token)
        .bind(delay.as_secs_f64())
        .bind(error.kind)
        .bind(&error.message)
        .execute(pool)
        .await?;
    Ok(Fenced::from_rows(done.rows_affected()))
}

/// Marks a job dead, keeping the attempt's error.
pub async fn kill(
    pool: &PgPool,
    id: JobId,
    token: Uuid,
    error: &AttemptError,
) -> Result<Fenced, sqlx::Error> {
    let done = sqlx::query(sql::KILL_JOB)
        .bind(id)
        .bind(token)
        .bind(error.kind)
        .bind(&error.message)
        .execute(pool)
        .await?;
    Ok(Fenced::from_rows(done.rows_affected()))
}

/// Makes a job ready again after `delay` without using an attempt.
pub async fn release(
    pool: &PgPool,
    id: JobId,
    token: Uuid,
    delay: Duration,
) -> Result<Fenced, sqlx::Error> {
    let done = sqlx::query(sql::RELEASE_JOB)
        .bind(id)
        .bind(token)
        .bind(delay.as_secs_f64())
        .execute(pool)
        .await?;
    Ok(Fenced::from_rows(done.rows_affected()))
}

/// Marks a job cancelled with a reason.
pub async fn cancel(
    pool: &PgPool,
    id: JobId,
    token: Uuid,
    reason: &str,
) -> Result<Fenced, sqlx::Error> {
    let done = sqlx::query(sql::CANCEL_JOB)
        .bind(id)
        .bind(token)
        .bind(reason)
        .execute(pool)
        .await?;
    Ok(Fenced::from_rows(done.rows_affected()))
}

/// Extends the leases of the given jobs by `lease`; returns the ids whose lease still held.
pub async fn heartbeat(
    pool: &PgPool,
    held: &[(JobId, Uuid)],
    lease: Duration,
) -> Result<Vec<JobId>, sqlx::Error> {
    let ids: Vec<JobId> = held.iter().map(|(id, _)| *id).collect();
    let tokens: Vec<Uuid> = held.iter().map(|(_, token)| *token).collect();
    sqlx::query_scalar(sql::HEARTBEAT)
        .bind(&ids)
        .bind(&tokens)
        .bind(lease.as_secs_f64())
        .fetch_all(pool)
        .await
}

/// A job returned by a rescue: its id, kind and new state (`ready` or `dead`).
#[derive(Debug, Clone, FromRow, PartialEq, Eq)]
pub struct RescuedJob {
    /// The job's id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// `ready`, or `dead` when its attempts were used up.
    pub state: String,
}

/// Returns up to `limit` jobs whose lease expired to ready (or dead when out of attempts).
pub async fn rescue_expired(pool: &PgPool, limit: usize) -> Result<Vec<RescuedJob>, sqlx::Error> {
    sqlx::query_as(sql::RESCUE_EXPIRED)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(pool)
        .await
}
