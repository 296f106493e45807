//! The scheduler every worker with schedules runs: turns each tick into one job, however many
//! processes schedule the same ticks.
//!
//! Each schedule has a row in `jobs_schedules` holding the last tick dealt with. A pass locks the
//! row (a second process waits, then finds nothing left to do), enqueues the ticks due since
//! (each with the dedupe key `<schedule>@<tick>`, a second guard against duplicates), moves the
//! last tick forward and commits. No lock outlives the transaction, so a crashed process leaves
//! nothing held. A pass that finds the row removed (by an operator, while this process still
//! declares the schedule) registers it again and says so, rather than failing at every tick.
//! The scheduler wakes at each tick by the database's clock (estimated from the
//! last pass) and, when it starts, passes once at once to deal with ticks missed while no
//! scheduler ran, as each schedule's missed-ticks policy says.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use jobs_core::Schedule;

use super::Shared;
use crate::backoff::ReconnectBackoff;
use crate::store;

/// Longest the scheduler sleeps between passes.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// How long after a tick the scheduler wakes, so that the tick is due by then.
const WAKE_MARGIN: Duration = Duration::from_millis(2);

/// A schedule with the settings of its kind.
struct Scheduled {
    schedule: Schedule,
    queue: &'static str,
    priority: i16,
    max_attempts: u32,
}

impl Scheduled {
    /// The schedule as the store records it.
    fn registration(&self) -> store::Registration<'_> {
        store::Registration {
            schedule: &self.schedule,
            queue: self.queue,
            priority: self.priority,
            max_attempts: i32::try_from(self.max_attempts)
                .expect("registrations refuse max_attempts beyond i32"),
        }
    }
}

/// Registers `schedules` and runs passes at their ticks until shutdown is requested.
pub async fn schedule(shared: Arc<Shared>, schedules: Vec<Schedule>) {
    let mut stop = shared.shutdown_requested.subscribe();
    let scheduled: Vec<Scheduled> = schedules
        .into_iter()
        .filter_map(|schedule| {
            let options = shared.registry.get(schedule.kind())?.options;
            Some(Scheduled {
                schedule,
                queue: options.queue,
                priority: options.priority,
                max_attempts: options.retry.max_attempts,
            })
        })
        .collect();
    let mut backoff = ReconnectBackoff::new(shared.config.max_reconnect_delay);
    loop {
        let registered = tokio::select! {
            registered = register(&shared, &scheduled) => registered,
            _ = stop.wait_for(|stop| *stop) => return,
        };
        match registered {
            Ok(()) => break,
            Err(error) => {
                let delay = backoff.next_delay();
                tracing::warn!(%error, ?delay, "registering schedules failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = stop.wait_for(|stop| *stop) => return,
                }
            }
        }
    }
    backoff.reset();
    // How far the database's clock is ahead of this process's, as of the last pass.
    let mut clock_offset = TimeDelta::zero();
    // Per schedule, the database time up to which its ticks were dealt with.
    let mut checked_until: HashMap<&str, DateTime<Utc>> = HashMap::new();
    loop {
        let database_now = Utc::now() + clock_offset;
        let mut failed = false;
        for scheduled in &scheduled {
            let name = scheduled.schedule.name();
            let due = checked_until.get(name).is_none_or(|checked| {
                scheduled
                    .schedule
                    .next_tick_after(*checked)
                    .is_some_and(|tick| tick <= database_now)
            });
            if !due {
                continue;
            }
            let sent_at = Utc::now();
            let dealt_with = checked_until.get(name).copied();
            let pass = tokio::select! {
                pass = pass_once(&shared, scheduled, dealt_with) => pass,
                _ = stop.wait_for(|stop| *stop) => return,
            };
            match pass {
                Ok(now) => {
                    clock_offset = now - sent_at;
                    checked_until.insert(name, now);
                }
                Err(error) => {
                    failed = true;
                    tracing::warn!(schedule = name, %error, "scheduling pass failed; retrying");
                }
            }
        }
        let sleep = if failed {
            backoff.next_delay()
        } else {
            backoff.reset();
            until_next_tick(&scheduled, &checked_until, clock_offset)
        };
        tokio::select! {
            () = tokio::time::sleep(sleep) => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
    }
}

/// Records every schedule in `jobs_schedules`.
async fn register(shared: &Shared, scheduled: &[Scheduled]) -> Result<(), sqlx::Error> {
    for scheduled in scheduled {
        store::upsert_schedule(&shared.pool, &scheduled.registration()).await?;
        tracing::info!(
            schedule = scheduled.schedule.name(),
            kind = scheduled.schedule.kind(),
            when = scheduled.schedule.describe(),
            "schedule registered"
        );
    }
    Ok(())
}

/// One pass for one schedule, `dealt_with` the database time up to which this process saw its
/// ticks dealt with; returns the database's clock at the pass.
async fn pass_once(
    shared: &Shared,
    scheduled: &Scheduled,
    dealt_with: Option<DateTime<Utc>>,
) -> Result<DateTime<Utc>, sqlx::Error> {
    let pass = store::schedule_pass(&shared.pool, &scheduled.registration(), dealt_with).await?;
    let name = scheduled.schedule.name();
    if pass.reregistered {
        tracing::warn!(
            schedule = name,
            kind = scheduled.schedule.kind(),
            when = scheduled.schedule.describe(),
            "schedule was removed from jobs_schedules while this worker still declares it: registered it again; remove it from the code (or stop this worker) to retire it"
        );
    }
    if pass.plan.missed > 0 {
        tracing::warn!(
            schedule = name,
            missed = pass.plan.missed,
            policy = ?scheduled.schedule.missed_ticks(),
            enqueued = pass.inserted,
            "ticks were missed while no scheduler ran"
        );
    } else if pass.inserted > 0 {
        tracing::debug!(schedule = name, enqueued = pass.inserted, "tick enqueued");
    }
    Ok(pass.now)
}

/// How long to sleep until the next tick of any schedule, by the database's clock.
fn until_next_tick(
    scheduled: &[Scheduled],
    checked_until: &HashMap<&str, DateTime<Utc>>,
    clock_offset: TimeDelta,
) -> Duration {
    let database_now = Utc::now() + clock_offset;
    scheduled
        .iter()
        .filter_map(|scheduled| {
            let checked = checked_until
                .get(scheduled.schedule.name())
                .copied()
                .unwrap_or(database_now);
            scheduled.schedule.next_tick_after(checked)
        })
        .min()
        .map_or(MAX_SLEEP, |tick| {
            (tick - database_now)
                .to_std()
                .unwrap_or(Duration::ZERO)
                .saturating_add(WAKE_MARGIN)
                .min(MAX_SLEEP)
        })
}
