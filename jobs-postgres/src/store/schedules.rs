//! Schedules: registering them, and the passes that enqueue their due ticks.

use chrono::{DateTime, Utc};
use jobs_core::{JobId, Schedule, TickPlan};
use sqlx::{PgConnection, PgPool};

use super::transactions;

/// Registers schedule `$1` (kind `$2`, queue `$3`, description `$4`, missed-ticks policy `$5`,
/// its jobs' priority `$6` and max attempts `$7`), or updates its settings; a new schedule's
/// first tick is the first after now. Ticks already dealt with are kept.
pub const UPSERT_SCHEDULE: &str = "
INSERT INTO jobs_schedules (name, kind, queue, description, missed, priority, max_attempts,
                            last_tick_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, now())
ON CONFLICT (name) DO UPDATE
SET kind = EXCLUDED.kind, queue = EXCLUDED.queue, description = EXCLUDED.description,
    missed = EXCLUDED.missed, priority = EXCLUDED.priority,
    max_attempts = EXCLUDED.max_attempts, updated_at = now()
WHERE (jobs_schedules.kind, jobs_schedules.queue, jobs_schedules.description, jobs_schedules.missed,
       jobs_schedules.priority, jobs_schedules.max_attempts)
      IS DISTINCT FROM (EXCLUDED.kind, EXCLUDED.queue, EXCLUDED.description, EXCLUDED.missed,
                        EXCLUDED.priority, EXCLUDED.max_attempts)";

/// Registers schedule `$1` again (with the settings `$2`..`$7` of [`UPSERT_SCHEDULE`]) when its
/// row was removed while a worker still declares it, with every tick up to `$8` (the last this
/// worker saw dealt with; now when NULL) counted as dealt with, so that the ticks since follow
/// the missed-ticks policy. A row registered meanwhile by another process is kept.
pub const REREGISTER_SCHEDULE: &str = "
INSERT INTO jobs_schedules (name, kind, queue, description, missed, priority, max_attempts,
                            last_tick_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, coalesce($8, now()))
ON CONFLICT (name) DO NOTHING";

/// Enqueues one run of schedule `$1` now, besides its ticks, with the settings its row holds
/// (no dedupe key: each trigger is one more run), and announces its queue. Returns whether the
/// schedule exists, and the new job's id; no id when the row holds no job settings yet
/// (registered by an older version).
pub const TRIGGER_SCHEDULE: &str = "
WITH schedule AS (
    SELECT name, kind, queue, priority, max_attempts FROM jobs_schedules WHERE name = $1
), inserted AS (
    INSERT INTO jobs_queue (kind, queue, payload, priority, max_attempts, run_at, schedule)
    SELECT kind, queue, '{}'::jsonb, priority, max_attempts, now(), name
    FROM schedule
    WHERE priority IS NOT NULL AND max_attempts IS NOT NULL
    RETURNING id, queue
), notified AS (
    SELECT pg_notify('jobs_queue', queue) FROM inserted
)
SELECT EXISTS (SELECT FROM schedule) AS found, (SELECT id FROM inserted) AS id,
       (SELECT count(*) FROM notified) AS notified";

/// Locks schedule `$1` for a scheduling pass (waiting for a pass of another process to end) and
/// returns the last tick dealt with and the database's clock.
pub const LOCK_SCHEDULE: &str = "
SELECT last_tick_at, now() AS now FROM jobs_schedules WHERE name = $1 FOR UPDATE";

/// Enqueues the ticks `$6` (timestamps) of schedule `$1` as jobs of kind `$2` in queue `$3` with
/// priority `$4` and max attempts `$5`, one per tick: each runs at its tick, with the dedupe key
/// `<schedule>@<tick>` (retained), so a tick already enqueued is skipped. Announces the queue.
/// Returns how many jobs were inserted.
pub const INSERT_SCHEDULED_JOBS: &str = "
WITH inserted AS (
    INSERT INTO jobs_queue (kind, queue, payload, priority, max_attempts, run_at, dedupe_key,
                            dedupe_scope, schedule)
    SELECT $2, $3, '{}'::jsonb, $4, $5, tick,
           $1 || '@' || to_char(tick AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'),
           'retained', $1
    FROM unnest($6::timestamptz[]) AS tick
    ON CONFLICT DO NOTHING
    RETURNING queue
), notified AS (
    SELECT pg_notify('jobs_queue', queue) FROM (SELECT DISTINCT queue FROM inserted) AS queues
)
SELECT count(*) AS inserted, (SELECT count(*) FROM notified) AS notified FROM inserted";

/// Records that every tick of schedule `$1` up to `$2` was dealt with.
pub const ADVANCE_SCHEDULE: &str = "
UPDATE jobs_schedules SET last_tick_at = $2 WHERE name = $1 AND last_tick_at < $2";

/// Locks schedule `$1` for its removal; returns its kind, description, last tick dealt with and
/// the database's clock.
pub const LOCK_SCHEDULE_FOR_REMOVAL: &str = "
SELECT kind, description, last_tick_at, now() AS now FROM jobs_schedules WHERE name = $1
FOR UPDATE";

/// Removes schedule `$1`; returns its name when it existed. Its jobs stay.
pub const REMOVE_SCHEDULE: &str = "DELETE FROM jobs_schedules WHERE name = $1 RETURNING name";

/// A schedule as a worker declares it: when it ticks, and the settings of its jobs.
#[derive(Debug, Clone, Copy)]
pub struct Registration<'a> {
    /// The schedule.
    pub schedule: &'a Schedule,
    /// The queue of its jobs.
    pub queue: &'a str,
    /// Their priority.
    pub priority: i16,
    /// Their max attempts.
    pub max_attempts: i32,
}

/// Binds a [`Registration`] as the parameters `$1`..`$7` of [`UPSERT_SCHEDULE`] and
/// [`REREGISTER_SCHEDULE`].
macro_rules! bind_registration {
    ($query:expr, $registration:expr) => {
        $query
            .bind($registration.schedule.name())
            .bind($registration.schedule.kind())
            .bind($registration.queue)
            .bind($registration.schedule.describe())
            .bind($registration.schedule.missed_ticks().to_string())
            .bind($registration.priority)
            .bind($registration.max_attempts)
    };
}

/// Registers a schedule, or updates its settings, keeping the ticks already dealt with.
pub async fn upsert_schedule(
    pool: &PgPool,
    registration: &Registration<'_>,
) -> Result<(), sqlx::Error> {
    bind_registration!(sqlx::query(UPSERT_SCHEDULE), registration)
        .execute(pool)
        .await
        .map(drop)
}

/// Enqueues one run of schedule `name` now: [`TRIGGER_SCHEDULE`]. `None` when there is no such
/// schedule; `Some(None)` when its row holds no job settings yet.
pub(crate) async fn trigger_schedule(
    pool: &PgPool,
    name: &str,
) -> Result<Option<Option<JobId>>, sqlx::Error> {
    let (found, id, _notified): (bool, Option<JobId>, i64) = sqlx::query_as(TRIGGER_SCHEDULE)
        .bind(name)
        .fetch_one(pool)
        .await?;
    Ok(found.then_some(id))
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
    registration: &Registration<'_>,
    dealt_with: Option<DateTime<Utc>>,
) -> Result<SchedulePass, sqlx::Error> {
    let Registration {
        schedule,
        queue,
        priority,
        max_attempts,
    } = *registration;
    let mut transaction = transactions::begin_on(pool).await?;
    let locked: Option<(DateTime<Utc>, DateTime<Utc>)> = sqlx::query_as(LOCK_SCHEDULE)
        .bind(schedule.name())
        .fetch_optional(&mut *transaction)
        .await?;
    let reregistered = locked.is_none();
    let (last_tick, now) = match locked {
        Some(locked) => locked,
        None => {
            bind_registration!(sqlx::query(REREGISTER_SCHEDULE), registration)
                .bind(dealt_with)
                .execute(&mut *transaction)
                .await?;
            sqlx::query_as(LOCK_SCHEDULE)
                .bind(schedule.name())
                .fetch_one(&mut *transaction)
                .await?
        }
    };
    let plan = schedule.plan(last_tick, now);
    let mut inserted = 0;
    if !plan.enqueue.is_empty() {
        (inserted, _) = sqlx::query_as::<_, (i64, i64)>(INSERT_SCHEDULED_JOBS)
            .bind(schedule.name())
            .bind(schedule.kind())
            .bind(queue)
            .bind(priority)
            .bind(max_attempts)
            .bind(&plan.enqueue)
            .fetch_one(&mut *transaction)
            .await?;
    }
    if let Some(latest) = plan.advance_to {
        sqlx::query(ADVANCE_SCHEDULE)
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

/// Locks schedule `name` in the transaction `conn` belongs to and returns its kind,
/// description, last tick dealt with and the database's clock; `None` when there is no such
/// schedule.
pub(crate) async fn lock_schedule_for_removal(
    conn: &mut PgConnection,
    name: &str,
) -> Result<Option<(String, String, DateTime<Utc>, DateTime<Utc>)>, sqlx::Error> {
    sqlx::query_as(LOCK_SCHEDULE_FOR_REMOVAL)
        .bind(name)
        .fetch_optional(&mut *conn)
        .await
}

/// Deletes schedule `name` in the transaction `conn` belongs to.
pub(crate) async fn remove_schedule(
    conn: &mut PgConnection,
    name: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(REMOVE_SCHEDULE)
        .bind(name)
        .execute(&mut *conn)
        .await
        .map(drop)
}
