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
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
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
    let query = match (after, kinds.len()) {
        (None, 1) => sqlx::query_as(sql::CLAIM_ONE_KIND),
        (Some(_), 1) => sqlx::query_as(sql::CLAIM_ONE_KIND_AFTER),
        (None, _) => sqlx::query_as(sql::CLAIM_JOBS),
        (Some(_), _) => sqlx::query_as(sql::CLAIM_JOBS_AFTER),
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

/// The columns of [`sql::RECORD_OUTCOMES`], one element per outcome, in the order of job ids.
///
/// Rows are locked in the order of the ids bound: the statement's join drives from the arrays,
/// looking each id up in the primary key. Binding every batch in id order (here, and for the
/// heartbeat in [`lease_columns`]) means two statements of any workers lock their common rows
/// in the same order, so they cannot deadlock. Sorting a few hundred ids in the process costs
/// nothing next to a statement; a locking subquery with `ORDER BY id FOR UPDATE` would cost a
/// second pass over the rows in every statement.
#[derive(Debug, Default, PartialEq)]
struct OutcomeColumns<'a> {
    ids: Vec<JobId>,
    tokens: Vec<Uuid>,
    states: Vec<&'static str>,
    delays: Vec<f64>,
    give_backs: Vec<bool>,
    error_kinds: Vec<Option<&'static str>>,
    errors: Vec<Option<&'a str>>,
}

impl<'a> OutcomeColumns<'a> {
    fn of(outcomes: &'a [Outcome]) -> Self {
        let mut sorted: Vec<&Outcome> = outcomes.iter().collect();
        sorted.sort_by_key(|outcome| outcome.id);
        let mut columns = Self::default();
        for outcome in sorted {
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
            columns.ids.push(outcome.id);
            columns.tokens.push(outcome.lease_token);
            columns.states.push(state);
            columns.delays.push(delay.as_secs_f64());
            columns.give_backs.push(give_back);
            columns.error_kinds.push(error_kind);
            columns.errors.push(error);
        }
        columns
    }
}

/// Writes many outcomes in one statement; returns, per outcome in order, whether its lease
/// still held (and so whether it was written). Rows are locked in id order (see
/// [`OutcomeColumns`]).
pub async fn record_outcomes(
    pool: &PgPool,
    outcomes: &[Outcome],
) -> Result<Vec<Fenced>, sqlx::Error> {
    let columns = OutcomeColumns::of(outcomes);
    let written: Vec<(JobId, Uuid)> = sqlx::query_as(sql::RECORD_OUTCOMES)
        .bind(&columns.ids)
        .bind(&columns.tokens)
        .bind(&columns.states)
        .bind(&columns.delays)
        .bind(&columns.give_backs)
        .bind(&columns.error_kinds)
        .bind(&columns.errors)
        .fetch_all(pool)
        .await?;
    let written: HashSet<(JobId, Uuid)> = written.into_iter().collect();
    Ok(outcomes
        .iter()
        .map(|outcome| {
            if written.contains(&(outcome.id, outcome.lease_token)) {
                Fenced::Written
            } else {
                Fenced::LeaseLost
            }
        })
        .collect())
}

/// The columns of [`sql::HEARTBEAT`] for runs `(id, token, lease)`, in the order of job ids, so
/// that rows are locked in id order (see [`OutcomeColumns`]).
fn lease_columns(held: &[(JobId, Uuid, Duration)]) -> (Vec<JobId>, Vec<Uuid>, Vec<f64>) {
    let mut sorted = held.to_vec();
    sorted.sort_by_key(|(id, _, _)| *id);
    let ids = sorted.iter().map(|(id, _, _)| *id).collect();
    let tokens = sorted.iter().map(|(_, token, _)| *token).collect();
    let leases = sorted
        .iter()
        .map(|(_, _, lease)| lease.as_secs_f64())
        .collect();
    (ids, tokens, leases)
}

/// Extends the leases of the given runs, `(id, token, lease)`, each by its own lease; returns
/// the runs, `(id, token)`, whose lease still held. Rows are locked in id order.
pub async fn heartbeat(
    pool: &PgPool,
    held: &[(JobId, Uuid, Duration)],
) -> Result<Vec<(JobId, Uuid)>, sqlx::Error> {
    let (ids, tokens, leases) = lease_columns(held);
    sqlx::query_as(sql::HEARTBEAT)
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

/// Returns up to `limit` jobs whose lease expired to ready (or dead when out of attempts),
/// skipping the jobs `set_aside`.
pub async fn rescue_expired(
    pool: &PgPool,
    limit: usize,
    set_aside: &[JobId],
) -> Result<Vec<RescuedJob>, sqlx::Error> {
    sqlx::query_as(sql::RESCUE_EXPIRED)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(set_aside)
        .fetch_all(pool)
        .await
}

/// A running job whose lease expired, not rescued yet: its id, kind and queue.
#[derive(Debug, Clone, FromRow, PartialEq, Eq)]
pub struct ExpiredJob {
    /// The job's id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
}

/// The jobs [`rescue_expired`] would take, without taking them.
pub async fn list_expired(
    pool: &PgPool,
    limit: usize,
    set_aside: &[JobId],
) -> Result<Vec<ExpiredJob>, sqlx::Error> {
    sqlx::query_as(sql::LIST_EXPIRED)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(set_aside)
        .fetch_all(pool)
        .await
}

/// Rescues the jobs `ids` as [`rescue_expired`] does, those whose lease is still expired.
pub async fn rescue_jobs(pool: &PgPool, ids: &[JobId]) -> Result<Vec<RescuedJob>, sqlx::Error> {
    sqlx::query_as(sql::RESCUE_JOBS)
        .bind(ids)
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
    /// Whether the schedule's row was missing (removed while this process declares the
    /// schedule) and was registered again by this pass.
    pub reregistered: bool,
}

/// One scheduling pass for `schedule`, in one transaction: locks its row (waiting for another
/// process's pass), plans the ticks due since the last one dealt with, enqueues them as jobs of
/// its kind and moves the last tick forward.
///
/// When the row is missing (an operator removed the schedule while this process still declares
/// it), the pass registers it again with every tick up to `dealt_with` (the last this process saw
/// dealt with; now when `None`) counted as done, so the ticks since follow the missed-ticks
/// policy, and says so in [`SchedulePass::reregistered`].
pub async fn schedule_pass(
    pool: &PgPool,
    schedule: &Schedule,
    queue: &str,
    priority: i16,
    max_attempts: u32,
    dealt_with: Option<DateTime<Utc>>,
) -> Result<SchedulePass, sqlx::Error> {
    let mut transaction = pool.begin().await?;
    let locked: Option<(DateTime<Utc>, DateTime<Utc>)> = sqlx::query_as(sql::LOCK_SCHEDULE)
        .bind(schedule.name())
        .fetch_optional(&mut *transaction)
        .await?;
    let reregistered = locked.is_none();
    let (last_tick, now) = match locked {
        Some(locked) => locked,
        None => {
            sqlx::query(sql::REREGISTER_SCHEDULE)
                .bind(schedule.name())
                .bind(schedule.kind())
                .bind(queue)
                .bind(schedule.describe())
                .bind(schedule.missed_ticks().to_string())
                .bind(dealt_with)
                .execute(&mut *transaction)
                .await?;
            sqlx::query_as(sql::LOCK_SCHEDULE)
                .bind(schedule.name())
                .fetch_one(&mut *transaction)
                .await?
        }
    };
    let plan = schedule.plan(last_tick, now);
    let mut inserted = 0;
    if !plan.enqueue.is_empty() {
        (inserted, _) = sqlx::query_as::<_, (i64, i64)>(sql::INSERT_SCHEDULED_JOBS)
            .bind(schedule.name())
            .bind(schedule.kind())
            .bind(queue)
            .bind(priority)
            .bind(
                i32::try_from(max_attempts).expect("registrations refuse max_attempts beyond i32"),
            )
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
        reregistered,
    })
}

#[cfg(test)]
mod tests {
    use jobs_core::AttemptError;

    use super::*;

    #[test]
    fn outcomes_are_bound_in_id_order() {
        let outcome = |id: JobId, decision: Decision| Outcome {
            id,
            lease_token: Uuid::new_v4(),
            decision,
        };
        let outcomes = [
            outcome(30, Decision::Complete),
            outcome(
                10,
                Decision::Dead {
                    error: AttemptError {
                        kind: "permanent",
                        message: String::from("bad"),
                    },
                },
            ),
            outcome(
                20,
                Decision::Snooze {
                    delay: Duration::from_secs(2),
                },
            ),
        ];
        let columns = OutcomeColumns::of(&outcomes);
        assert_eq!(columns.ids, [10, 20, 30]);
        assert_eq!(
            columns.tokens,
            [
                outcomes[1].lease_token,
                outcomes[2].lease_token,
                outcomes[0].lease_token
            ]
        );
        assert_eq!(columns.states, ["dead", "ready", "done"]);
        assert_eq!(columns.delays, [0.0, 2.0, 0.0]);
        assert_eq!(columns.give_backs, [false, true, false]);
        assert_eq!(columns.error_kinds, [Some("permanent"), None, None]);
        assert_eq!(columns.errors, [Some("bad"), None, None]);
    }

    #[test]
    fn leases_are_bound_in_id_order() {
        let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let held = [
            (9, a, Duration::from_secs(9)),
            (3, b, Duration::from_secs(3)),
            (5, c, Duration::from_secs(5)),
        ];
        let (ids, tokens, leases) = lease_columns(&held);
        assert_eq!(ids, [3, 5, 9]);
        assert_eq!(tokens, [b, c, a]);
        assert_eq!(leases, [3.0, 5.0, 9.0]);
    }
}
