//! The worker's seam to the database: one function per operation, typed rows out.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use jobs_core::{Decision, JobId, Schedule, TickPlan};
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
    /// Its priority.
    pub priority: i16,
    /// When it became due.
    pub run_at: DateTime<Utc>,
    /// Seconds the job had been due (since its `run_at`) when claimed, by the database's clock:
    /// its pickup latency.
    pub waited_secs: f64,
}

impl ClaimedJob {
    /// Its place in the claim order.
    pub fn place(&self) -> ClaimPlace {
        ClaimPlace {
            priority: self.priority,
            run_at: self.run_at,
            id: self.id,
        }
    }

    /// How long the job had been due when claimed: its pickup latency.
    pub fn waited(&self) -> Duration {
        Duration::try_from_secs_f64(self.waited_secs.max(0.0)).unwrap_or_default()
    }
}

/// A place in the order claims take ready jobs in: priority (higher first), then `run_at`, then
/// id. Places compare in that order: the smaller is claimed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimPlace {
    /// The job's priority.
    pub priority: i16,
    /// When it became due.
    pub run_at: DateTime<Utc>,
    /// Its id.
    pub id: JobId,
}

impl Ord for ClaimPlace {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other
            .priority
            .cmp(&self.priority)
            .then(self.run_at.cmp(&other.run_at))
            .then(self.id.cmp(&other.id))
    }
}

impl PartialOrd for ClaimPlace {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Whether an outcome was written, or the lease had already been lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// The write happened: the lease still held the job.
    Written,
    /// Nothing was written: another claim or a rescue had taken the job.
    LeaseLost,
}

/// Claims up to `limit` ready jobs of `kinds` from `queue`, each leased for the duration that
/// `leases` gives its kind (`leases` pairs with `kinds`): from the front of the claim order, or,
/// with `after`, only jobs of the same priority after that place, and none while a job of a
/// higher priority is ready.
pub async fn claim(
    pool: &PgPool,
    queue: &str,
    kinds: &[&str],
    leases: &[Duration],
    limit: usize,
    after: Option<ClaimPlace>,
) -> Result<Vec<ClaimedJob>, sqlx::Error> {
    let lease_secs: Vec<f64> = leases.iter().map(Duration::as_secs_f64).collect();
    let query = match after {
        None => sqlx::query_as(sql::CLAIM_JOBS),
        Some(_) => sqlx::query_as(sql::CLAIM_JOBS_AFTER),
    };
    let mut query = query
        .bind(queue)
        .bind(kinds)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(lease_secs);
    if let Some(place) = after {
        query = query.bind(place.priority).bind(place.run_at).bind(place.id);
    }
    query.fetch_all(pool).await
}

/// The outcome of one run, ready to be written.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The job's id.
    pub id: JobId,
    /// The lease token of the claim that ran it.
    pub lease_token: Uuid,
    /// What to do with the job.
    pub decision: Decision,
}

/// Writes many outcomes in one statement; returns, per outcome in order, whether its lease
/// still held (and so whether it was written).
pub async fn record_outcomes(
    pool: &PgPool,
    outcomes: &[Outcome],
) -> Result<Vec<Fenced>, sqlx::Error> {
    let mut ids = Vec::with_capacity(outcomes.len());
    let mut tokens = Vec::with_capacity(outcomes.len());
    let mut states = Vec::with_capacity(outcomes.len());
    let mut delays = Vec::with_capacity(outcomes.len());
    let mut give_backs = Vec::with_capacity(outcomes.len());
    let mut error_kinds: Vec<Option<&str>> = Vec::with_capacity(outcomes.len());
    let mut errors: Vec<Option<&str>> = Vec::with_capacity(outcomes.len());
    for outcome in outcomes {
        let (state, delay, give_back, error_kind, error) = match &outcome.decision {
            Decision::Complete => ("done", Duration::ZERO, false, None, None),
            Decision::Retry { delay, error } => (
                "ready",
                *delay,
                false,
                Some(error.kind),
                Some(error.message.as_str()),
            ),
            Decision::Dead { error } => (
                "dead",
                Duration::ZERO,
                false,
                Some(error.kind),
                Some(error.message.as_str()),
            ),
            Decision::Snooze { delay } => ("ready", *delay, true, None, None),
            Decision::Cancel { reason } => (
                "cancelled",
                Duration::ZERO,
                false,
                Some("cancelled"),
                Some(reason.as_str()),
            ),
        };
        ids.push(outcome.id);
        tokens.push(outcome.lease_token);
        states.push(state);
        delays.push(delay.as_secs_f64());
        give_backs.push(give_back);
        error_kinds.push(error_kind);
        errors.push(error);
    }
    let written: Vec<JobId> = sqlx::query_scalar(sql::RECORD_OUTCOMES)
        .bind(&ids)
        .bind(&tokens)
        .bind(&states)
        .bind(&delays)
        .bind(&give_backs)
        .bind(&error_kinds)
        .bind(&errors)
        .fetch_all(pool)
        .await?;
    let written: HashSet<JobId> = written.into_iter().collect();
    Ok(ids
        .iter()
        .map(|id| {
            if written.contains(id) {
                Fenced::Written
            } else {
                Fenced::LeaseLost
            }
        })
        .collect())
}

/// Extends the leases of the given jobs, `(id, token, lease)`, each by its own lease; returns
/// the ids whose lease still held.
pub async fn heartbeat(
    pool: &PgPool,
    held: &[(JobId, Uuid, Duration)],
) -> Result<Vec<JobId>, sqlx::Error> {
    let ids: Vec<JobId> = held.iter().map(|(id, _, _)| *id).collect();
    let tokens: Vec<Uuid> = held.iter().map(|(_, token, _)| *token).collect();
    let leases: Vec<f64> = held
        .iter()
        .map(|(_, _, lease)| lease.as_secs_f64())
        .collect();
    sqlx::query_scalar(sql::HEARTBEAT)
        .bind(&ids)
        .bind(&tokens)
        .bind(&leases)
        .fetch_all(pool)
        .await
}

/// A job returned by a rescue: its id, kind, queue and new state (`ready` or `dead`).
#[derive(Debug, Clone, FromRow, PartialEq, Eq)]
pub struct RescuedJob {
    /// The job's id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
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

/// Claims up to `limit` ready jobs of `kind` from `queues`, but no more than leave at most
/// `max_running` of the kind running across all workers, each leased for `lease`. One
/// transaction: the kind's advisory lock, then the claim.
pub async fn claim_limited(
    pool: &PgPool,
    kind: &str,
    queues: &[String],
    limit: usize,
    max_running: u32,
    lease: Duration,
) -> Result<Vec<ClaimedJob>, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    sqlx::query(sql::LOCK_LIMITED_KIND)
        .bind(kind)
        .execute(&mut *transaction)
        .await?;
    let claimed = sqlx::query_as(sql::CLAIM_LIMITED_JOBS)
        .bind(kind)
        .bind(queues)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(i64::from(max_running))
        .bind(lease.as_secs_f64())
        .fetch_all(&mut *transaction)
        .await?;
    transaction.commit().await?;
    Ok(claimed)
}

/// Registers a schedule, or updates its settings, keeping the ticks already dealt with.
pub async fn upsert_schedule(
    pool: &PgPool,
    schedule: &Schedule,
    queue: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(sql::UPSERT_SCHEDULE)
        .bind(schedule.name())
        .bind(schedule.kind())
        .bind(queue)
        .bind(schedule.describe())
        .bind(schedule.missed_ticks().to_string())
        .execute(pool)
        .await
        .map(drop)
}

/// What a scheduling pass did for one schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulePass {
    /// The ticks planned, as [`Schedule::plan`] saw them.
    pub plan: TickPlan,
    /// Jobs inserted (ticks already enqueued are skipped).
    pub inserted: i64,
    /// The database's clock when the pass began.
    pub now: DateTime<Utc>,
}

/// One scheduling pass for `schedule`, in one transaction: locks its row (waiting for another
/// process's pass), plans the ticks due since the last one dealt with, enqueues them as jobs of
/// its kind and moves the last tick forward.
pub async fn schedule_pass(
    pool: &PgPool,
    schedule: &Schedule,
    queue: &str,
    priority: i16,
    max_attempts: u32,
) -> Result<SchedulePass, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    let (last_tick, now): (DateTime<Utc>, DateTime<Utc>) = sqlx::query_as(sql::LOCK_SCHEDULE)
        .bind(schedule.name())
        .fetch_one(&mut *transaction)
        .await?;
    let plan = schedule.plan(last_tick, now);
    let mut inserted = 0;
    if !plan.enqueue.is_empty() {
        (inserted, _) = sqlx::query_as::<_, (i64, i64)>(sql::INSERT_SCHEDULED_JOBS)
            .bind(schedule.name())
            .bind(schedule.kind())
            .bind(queue)
            .bind(priority)
            .bind(i32::try_from(max_attempts).unwrap_or(i32::MAX))
            .bind(&plan.enqueue)
            .fetch_one(&mut *transaction)
            .await?;
    }
    if let Some(latest) = plan.advance_to {
        sqlx::query(sql::ADVANCE_SCHEDULE)
            .bind(schedule.name())
            .bind(latest)
            .execute(&mut *transaction)
            .await?;
    }
    transaction.commit().await?;
    Ok(SchedulePass {
        plan,
        inserted,
        now,
    })
}
