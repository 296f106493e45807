//! Schedules: registering them, and the passes that enqueue their due ticks.

use chrono::{DateTime, Utc};
use jobs_core::{Schedule, TickPlan};
use sqlx::{PgConnection, PgPool};

/// Registers schedule `$1` (kind `$2`, queue `$3`, description `$4`, missed-ticks policy `$5`),
/// or updates its settings; a new schedule's first tick is the first after now. Ticks already
/// dealt with are kept.
pub const UPSERT_SCHEDULE: &str = "
INSERT INTO jobs_schedules (name, kind, queue, description, missed, last_tick_at)
VALUES ($1, $2, $3, $4, $5, now())
ON CONFLICT (name) DO UPDATE
SET kind = EXCLUDED.kind, queue = EXCLUDED.queue, description = EXCLUDED.description,
    missed = EXCLUDED.missed, updated_at = now()
WHERE (jobs_schedules.kind, jobs_schedules.queue, jobs_schedules.description, jobs_schedules.missed)
      IS DISTINCT FROM (EXCLUDED.kind, EXCLUDED.queue, EXCLUDED.description, EXCLUDED.missed)";

/// Registers schedule `$1` again (kind `$2`, queue `$3`, description `$4`, missed-ticks policy
/// `$5`) when its row was removed while a worker still declares it, with every tick up to `$6`
/// (the last this worker saw dealt with; now when NULL) counted as dealt with, so that the ticks
/// since follow the missed-ticks policy. A row registered meanwhile by another process is kept.
pub const REREGISTER_SCHEDULE: &str = "
INSERT INTO jobs_schedules (name, kind, queue, description, missed, last_tick_at)
VALUES ($1, $2, $3, $4, $5, coalesce($6, now()))
ON CONFLICT (name) DO NOTHING";

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

// ---------------------------------------------------------------------------------------------
// The transactional outbox: events written in the caller's transaction, published by a relay
// (see `crate::outbox`).
// ---------------------------------------------------------------------------------------------

/// Registers a schedule, or updates its settings, keeping the ticks already dealt with.
pub async fn upsert_schedule(
    pool: &PgPool,
    schedule: &Schedule,
    queue: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(UPSERT_SCHEDULE)
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
    let locked: Option<(DateTime<Utc>, DateTime<Utc>)> = sqlx::query_as(LOCK_SCHEDULE)
        .bind(schedule.name())
        .fetch_optional(&mut *transaction)
        .await?;
    let reregistered = locked.is_none();
    let (last_tick, now) = match locked {
        Some(locked) => locked,
        None => {
            sqlx::query(REREGISTER_SCHEDULE)
                .bind(schedule.name())
                .bind(schedule.kind())
                .bind(queue)
                .bind(schedule.describe())
                .bind(schedule.missed_ticks().to_string())
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
            .bind(
                i32::try_from(max_attempts).expect("registrations refuse max_attempts beyond i32"),
            )
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
