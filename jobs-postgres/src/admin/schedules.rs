//! Schedules an operator acts on: [`remove_schedule`] one the code no longer declares,
//! [`trigger_schedule`] one run now.

use chrono::{DateTime, Utc};
use jobs_core::JobId;
use jobs_core::Schedule;
use sqlx::PgPool;

use super::error::refuse_nul;
use super::AdminError;
use crate::store::schedules as store;
use crate::store::transactions;

/// Whether [`remove_schedule`] removes a schedule that a worker seems to run still.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Remove it only when no tick is being kept up with: at least two of its ticks have come
    /// due since the last one a scheduling pass dealt with (or its description is unreadable).
    IfInactive,
    /// Remove it whatever its ticks say. A worker that still declares it registers it again at
    /// its next pass.
    Force,
}

/// What [`remove_schedule`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleRemoval {
    /// The schedule was removed; its jobs stay.
    Removed,
    /// There is no schedule by that name.
    NotFound,
    /// The schedule is kept up with (a worker probably declares it still, and would register it
    /// again): nothing was removed. Stop the workers that declare it, or use [`Removal::Force`].
    Active {
        /// The last tick a scheduling pass dealt with.
        last_tick: DateTime<Utc>,
        /// When its next tick comes due, if it has one.
        next_tick: Option<DateTime<Utc>>,
    },
}

/// Removes the schedule `name` from `jobs_schedules`, so that it is no longer reported (a
/// schedule removed from the code stays there until then). Its jobs stay.
///
/// A schedule whose ticks are being kept up with (fewer than two have come due since the last
/// one a pass dealt with) is refused unless `removal` is [`Removal::Force`]: some worker probably
/// still declares it, and would only register it again. The check and the removal hold the
/// row's lock, so a scheduling pass cannot slip between them.
pub async fn remove_schedule(
    pool: &PgPool,
    name: &str,
    removal: Removal,
) -> Result<ScheduleRemoval, AdminError> {
    refuse_nul("schedule name", name)?;
    let mut transaction = transactions::begin_on(pool).await?;
    let decision = decide_removal(&mut transaction, name, removal).await?;
    if decision == ScheduleRemoval::Removed {
        store::remove_schedule(&mut transaction, name).await?;
        transaction.commit().await?;
    }
    Ok(decision)
}

/// What [`remove_schedule`] would do now with the same arguments, changing nothing:
/// [`ScheduleRemoval::Removed`] means it would remove the schedule.
pub async fn preview_schedule_removal(
    pool: &PgPool,
    name: &str,
    removal: Removal,
) -> Result<ScheduleRemoval, AdminError> {
    refuse_nul("schedule name", name)?;
    let mut transaction = transactions::begin_on(pool).await?;
    let decision = decide_removal(&mut transaction, name, removal).await?;
    transaction.rollback().await?;
    Ok(decision)
}

/// Locks schedule `name` in `transaction` and decides whether `removal` removes it.
async fn decide_removal(
    transaction: &mut sqlx::PgConnection,
    name: &str,
    removal: Removal,
) -> Result<ScheduleRemoval, AdminError> {
    let row = store::lock_schedule_for_removal(transaction, name).await?;
    let Some((kind, description, last_tick, now)) = row else {
        return Ok(ScheduleRemoval::NotFound);
    };
    if removal == Removal::IfInactive {
        if let Ok(schedule) = Schedule::parse(name, kind, &description) {
            if schedule.ticks_back(last_tick, now, 2).len() < 2 {
                return Ok(ScheduleRemoval::Active {
                    last_tick,
                    next_tick: schedule.next_tick_after(last_tick),
                });
            }
        }
    }
    Ok(ScheduleRemoval::Removed)
}

/// What [`trigger_schedule`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// One run was enqueued, due now; the schedule's ticks are untouched.
    Enqueued {
        /// The new job.
        id: JobId,
    },
    /// There is no schedule by that name.
    NotFound,
    /// The schedule was registered by a version that did not record its jobs' settings
    /// (priority, max attempts): start a worker of this version, which records them, and
    /// trigger again.
    SettingsUnknown,
}

/// Enqueues one run of schedule `name` now, with the queue, priority and max attempts its
/// workers registered, besides its ticks: the regular ticks, and what they count as missed, are
/// untouched. Each call is one more run (a trigger has no dedupe key); its success counts as the
/// schedule's last success.
pub async fn trigger_schedule(pool: &PgPool, name: &str) -> Result<Trigger, AdminError> {
    refuse_nul("schedule name", name)?;
    Ok(match store::trigger_schedule(pool, name).await? {
        Some(Some(id)) => {
            tracing::info!(schedule = name, job = id, "schedule triggered");
            Trigger::Enqueued { id }
        }
        Some(None) => Trigger::SettingsUnknown,
        None => Trigger::NotFound,
    })
}
