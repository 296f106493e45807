//! Schedules: when a job kind without data arguments runs on its own, by a cron expression in a
//! time zone or at a fixed interval, and what happens to ticks missed while no scheduler ran.
//!
//! Everything here is pure time arithmetic: which ticks are due, which of them were missed, and
//! how many ticks have passed since a schedule last succeeded. The backend turns each tick into
//! one job and keeps the bookkeeping.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use croner::Cron;

use crate::duration::{format_duration, parse_duration};

/// Longest lateness a tick may have and still count as on time, whatever its period.
pub const MAX_LATE_TOLERANCE: Duration = Duration::from_secs(60);

/// How far back [`Schedule::previous_tick`] steps when the cron parser's backward search
/// answers a tick after the time asked about (around a daylight-saving change).
const DST_SEARCH_STEP: TimeDelta = TimeDelta::hours(1);

/// Shortest interval an `every` schedule may have.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// When a scheduled kind runs, as written in `#[job(cron = .., timezone = ..)]` or
/// `#[job(every = ..)]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cadence {
    /// A cron expression (five fields, or six with seconds first), evaluated in an IANA time
    /// zone such as `"Europe/Paris"` (`"UTC"` by default).
    Cron {
        /// The expression, such as `"0 3 * * *"`.
        expression: &'static str,
        /// The time zone.
        timezone: &'static str,
    },
    /// A fixed interval, at least one second; ticks fall on whole multiples of it since the Unix
    /// epoch, so every process agrees on them.
    Every(Duration),
}

/// What a scheduler does with ticks missed while no scheduler ran (all processes down, say).
///
/// A tick is missed when the scheduler first sees it later than its tolerance: its period (the
/// time to the next tick), at most [`MAX_LATE_TOLERANCE`]. Ticks within it are on time and
/// always run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissedTicks {
    /// Run once for the latest missed tick (the default): one catch-up run, however long the
    /// gap.
    #[default]
    Latest,
    /// Run every missed tick, the latest `max` of them at most.
    All {
        /// The most missed ticks run after one gap.
        max: u32,
    },
    /// Run none of them: wait for the next tick.
    Skip,
}

impl MissedTicks {
    /// How many missed ticks `all` runs when no bound is given.
    pub const DEFAULT_MAX: u32 = 10;

    /// Parses `"latest"`, `"skip"` or `"all"` (with `max` missed ticks at most).
    pub fn parse(policy: &str, max: u32) -> Result<Self, ScheduleError> {
        match policy {
            "latest" => Ok(MissedTicks::Latest),
            "skip" => Ok(MissedTicks::Skip),
            "all" => Ok(MissedTicks::All { max }),
            other => Err(ScheduleError::UnknownMissedPolicy(other.to_string())),
        }
    }
}

/// As stored with a schedule and shown by `jobs stats`: `latest`, `skip` or `all:<max>`.
impl fmt::Display for MissedTicks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MissedTicks::Latest => f.write_str("latest"),
            MissedTicks::Skip => f.write_str("skip"),
            MissedTicks::All { max } => write!(f, "all:{max}"),
        }
    }
}

/// The schedule of a kind, as `#[job]` declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleOptions {
    /// When it runs.
    pub cadence: Cadence,
    /// What happens to missed ticks.
    pub missed: MissedTicks,
}

/// Why a schedule cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The cron expression does not parse.
    #[error("invalid cron expression `{expression}`: {reason}")]
    InvalidCron {
        /// The expression.
        expression: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The time zone is not an IANA time zone name.
    #[error("unknown time zone `{0}`: expected an IANA name such as `UTC` or `Europe/Paris`")]
    UnknownTimezone(String),
    /// The interval is too short.
    #[error("interval {0:?} is too short: schedules tick at most once a second")]
    IntervalTooShort(Duration),
    /// The missed-ticks policy is not one of `latest`, `all`, `skip`.
    #[error("unknown missed-ticks policy `{0}`: expected `latest`, `all` or `skip`")]
    UnknownMissedPolicy(String),
    /// A stored schedule description does not parse.
    #[error("unreadable schedule `{0}`: expected `cron <expression> [in <time zone>]` or `every <duration>`")]
    Unreadable(String),
    /// The expression never fires (such as the 30th of February).
    #[error("cron expression `{0}` never fires")]
    NeverFires(String),
}

/// Checks a cron expression and time zone as schedules use them; `#[job]` calls it at compile
/// time, so that a mistake in the attribute is a compile error.
pub fn check_cron(expression: &str, timezone: &str) -> Result<(), ScheduleError> {
    Schedule::cron("", expression, timezone).map(drop)
}

fn parse_cron(expression: &str) -> Result<Cron, ScheduleError> {
    Cron::from_str(expression).map_err(|error| ScheduleError::InvalidCron {
        expression: expression.to_string(),
        reason: error.to_string(),
    })
}

fn parse_timezone(timezone: &str) -> Result<chrono_tz::Tz, ScheduleError> {
    timezone
        .parse::<chrono_tz::Tz>()
        .map_err(|_| ScheduleError::UnknownTimezone(timezone.to_string()))
}

/// When ticks fall, parsed and ready to compute with.
#[derive(Debug, Clone)]
enum Timing {
    Cron {
        cron: Box<Cron>,
        expression: String,
        timezone: chrono_tz::Tz,
    },
    Every(Duration),
}

/// A schedule: a name (unique across the application; by default the kind's name), the kind it
/// enqueues, when it ticks and what happens to missed ticks.
#[derive(Debug, Clone)]
pub struct Schedule {
    name: String,
    kind: String,
    timing: Timing,
    missed: MissedTicks,
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.kind == other.kind
            && self.missed == other.missed
            && self.describe() == other.describe()
    }
}

/// What one scheduling pass should do about a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickPlan {
    /// Ticks to turn into jobs, oldest first.
    pub enqueue: Vec<DateTime<Utc>>,
    /// Ticks seen missed in this pass (at most the few this pass looked at).
    pub missed: usize,
    /// The latest due tick: everything up to it is dealt with. `None` when nothing is due.
    pub advance_to: Option<DateTime<Utc>>,
}

impl Schedule {
    /// A schedule for `kind` by a cron expression in `timezone` (an IANA name such as `"UTC"`).
    pub fn cron(
        kind: impl Into<String>,
        expression: &str,
        timezone: &str,
    ) -> Result<Self, ScheduleError> {
        let cron = parse_cron(expression)?;
        let timezone = parse_timezone(timezone)?;
        let kind = kind.into();
        let schedule = Self {
            name: kind.clone(),
            kind,
            timing: Timing::Cron {
                cron: Box::new(cron),
                expression: expression.to_string(),
                timezone,
            },
            missed: MissedTicks::default(),
        };
        if schedule.previous_tick(Utc::now()).is_none()
            && schedule.next_tick_after(Utc::now()).is_none()
        {
            return Err(ScheduleError::NeverFires(expression.to_string()));
        }
        Ok(schedule)
    }

    /// A schedule for `kind` every `interval` (at least a second).
    pub fn every(kind: impl Into<String>, interval: Duration) -> Result<Self, ScheduleError> {
        if interval < MIN_INTERVAL {
            return Err(ScheduleError::IntervalTooShort(interval));
        }
        let kind = kind.into();
        Ok(Self {
            name: kind.clone(),
            kind,
            timing: Timing::Every(interval),
            missed: MissedTicks::default(),
        })
    }

    /// The schedule `#[job]` declared for `kind`.
    pub fn from_options(kind: &str, options: &ScheduleOptions) -> Result<Self, ScheduleError> {
        let schedule = match options.cadence {
            Cadence::Cron {
                expression,
                timezone,
            } => Self::cron(kind, expression, timezone)?,
            Cadence::Every(interval) => Self::every(kind, interval)?,
        };
        Ok(schedule.missed(options.missed))
    }

    /// Reads a schedule back from its [`describe`](Self::describe) text, as stored.
    pub fn parse(
        name: impl Into<String>,
        kind: impl Into<String>,
        description: &str,
    ) -> Result<Self, ScheduleError> {
        let unreadable = || ScheduleError::Unreadable(description.to_string());
        let schedule = if let Some(interval) = description.strip_prefix("every ") {
            let interval = parse_duration(interval).map_err(|_| unreadable())?;
            Self::every(kind, interval)?
        } else if let Some(cron) = description.strip_prefix("cron ") {
            let (expression, timezone) = cron.rsplit_once(" in ").ok_or_else(unreadable)?;
            Self::cron(kind, expression, timezone)?
        } else {
            return Err(unreadable());
        };
        Ok(schedule.named(name))
    }

    /// Renames the schedule (one kind may have several schedules under different names).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Sets what happens to missed ticks.
    pub fn missed(mut self, missed: MissedTicks) -> Self {
        self.missed = missed;
        self
    }

    /// The schedule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kind it enqueues.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// Its missed-ticks policy.
    pub fn missed_ticks(&self) -> MissedTicks {
        self.missed
    }

    /// A one-line description that [`parse`](Self::parse) reads back: `cron 0 3 * * * in UTC`
    /// or `every 10s`.
    pub fn describe(&self) -> String {
        match &self.timing {
            Timing::Cron {
                expression,
                timezone,
                ..
            } => format!("cron {expression} in {timezone}"),
            Timing::Every(interval) => format!("every {}", format_duration(*interval)),
        }
    }

    /// The first tick strictly after `after`.
    pub fn next_tick_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.timing {
            Timing::Cron { cron, timezone, .. } => cron
                .find_next_occurrence(&after.with_timezone(timezone), false)
                .ok()
                .map(|tick| tick.with_timezone(&Utc)),
            Timing::Every(interval) => {
                let step = interval_delta(*interval);
                let latest = floor_to(after, step);
                latest.checked_add_signed(step)
            }
        }
    }

    /// The latest tick at or before `at`.
    ///
    /// Around a daylight-saving change the cron parser's backward search can answer a tick
    /// after `at` (the second of two equal wall-clock times) or step over one, while its
    /// forward search does not: the answer is checked, and corrected by walking forward from a
    /// tick that is surely earlier.
    pub fn previous_tick(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.timing {
            Timing::Cron { cron, timezone, .. } => {
                let backward = |from: DateTime<Utc>| {
                    cron.find_previous_occurrence(&from.with_timezone(timezone), true)
                        .ok()
                        .map(|tick| tick.with_timezone(&Utc))
                };
                let mut start = backward(at)?;
                let mut from = at;
                while start > at {
                    from = from.checked_sub_signed(DST_SEARCH_STEP)?;
                    start = backward(from)?;
                }
                while let Some(next) = self.next_tick_after(start).filter(|next| *next <= at) {
                    start = next;
                }
                Some(start)
            }
            Timing::Every(interval) => Some(floor_to(at, interval_delta(*interval))),
        }
    }

    /// Up to `limit` ticks in `(after, until]`, latest first.
    pub fn ticks_back(
        &self,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: usize,
    ) -> Vec<DateTime<Utc>> {
        let mut ticks = Vec::new();
        let mut cursor = self.previous_tick(until);
        while let Some(tick) = cursor {
            if tick <= after || ticks.len() >= limit {
                break;
            }
            ticks.push(tick);
            cursor = tick
                .checked_sub_signed(TimeDelta::milliseconds(1))
                .and_then(|before| self.previous_tick(before));
        }
        ticks
    }

    /// How late `tick` may be seen and still count as on time: the time to the next tick, at
    /// most [`MAX_LATE_TOLERANCE`].
    pub fn late_tolerance(&self, tick: DateTime<Utc>) -> Duration {
        let period = self
            .next_tick_after(tick)
            .and_then(|next| (next - tick).to_std().ok())
            .unwrap_or(MAX_LATE_TOLERANCE);
        period.min(MAX_LATE_TOLERANCE)
    }

    /// What a scheduling pass at `now` does, when every tick up to `last_tick` was dealt with:
    /// the due ticks are those in `(last_tick, now]`; those on time are enqueued, the missed
    /// ones follow the policy.
    pub fn plan(&self, last_tick: DateTime<Utc>, now: DateTime<Utc>) -> TickPlan {
        let max_missed = match self.missed {
            MissedTicks::All { max } => usize::try_from(max).unwrap_or(usize::MAX),
            MissedTicks::Latest => 1,
            MissedTicks::Skip => 0,
        };
        // Enough ticks to hold the on-time one, the missed ones the policy runs, and one more
        // to tell whether any tick was missed at all.
        let due = self.ticks_back(last_tick, now, max_missed.saturating_add(2));
        let Some(&latest) = due.first() else {
            return TickPlan {
                enqueue: Vec::new(),
                missed: 0,
                advance_to: None,
            };
        };
        let (on_time, missed): (Vec<_>, Vec<_>) = due.into_iter().partition(|tick| {
            (now - *tick)
                .to_std()
                .map_or(true, |late| late <= self.late_tolerance(*tick))
        });
        let mut enqueue: Vec<DateTime<Utc>> = missed.iter().take(max_missed).copied().collect();
        enqueue.extend(on_time);
        enqueue.sort();
        TickPlan {
            enqueue,
            missed: missed.len(),
            advance_to: Some(latest),
        }
    }

    /// How many ticks came due in `(since, now - grace]`, counting at most `limit`: ticks that
    /// had their grace to succeed, after the last success (or since the schedule started).
    pub fn ticks_since(
        &self,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
        grace: Duration,
        limit: usize,
    ) -> usize {
        let until = now - TimeDelta::from_std(grace).unwrap_or(TimeDelta::MAX);
        self.ticks_back(since, until, limit).len()
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}, {})", self.name, self.kind, self.describe())
    }
}

fn interval_delta(interval: Duration) -> TimeDelta {
    TimeDelta::from_std(interval).unwrap_or(TimeDelta::MAX)
}

/// The latest whole multiple of `step` since the Unix epoch at or before `at`.
fn floor_to(at: DateTime<Utc>, step: TimeDelta) -> DateTime<Utc> {
    let step_ms = step.num_milliseconds().max(1);
    let at_ms = at.timestamp_millis();
    let floored = at_ms - at_ms.rem_euclid(step_ms);
    DateTime::from_timestamp_millis(floored).unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().unwrap()
    }

    #[test]
    fn intervals_tick_on_multiples_since_the_epoch() {
        let every = Schedule::every("tidy", Duration::from_secs(10)).unwrap();
        assert_eq!(
            every.next_tick_after(at("2026-01-01T00:00:03Z")),
            Some(at("2026-01-01T00:00:10Z"))
        );
        assert_eq!(
            every.previous_tick(at("2026-01-01T00:00:10Z")),
            Some(at("2026-01-01T00:00:10Z"))
        );
        assert_eq!(
            Schedule::every("x", Duration::from_millis(500)),
            Err(ScheduleError::IntervalTooShort(Duration::from_millis(500)))
        );
    }

    #[test]
    fn cron_ticks_in_its_time_zone() {
        let nightly = Schedule::cron("report", "0 3 * * *", "Europe/Paris").unwrap();
        // 03:00 in Paris is 02:00 UTC in winter.
        assert_eq!(
            nightly.next_tick_after(at("2026-01-10T12:00:00Z")),
            Some(at("2026-01-11T02:00:00Z"))
        );
        assert!(matches!(
            Schedule::cron("report", "61 * * * *", "UTC"),
            Err(ScheduleError::InvalidCron { .. })
        ));
        assert_eq!(
            Schedule::cron("report", "0 3 * * *", "Mars/Olympus"),
            Err(ScheduleError::UnknownTimezone("Mars/Olympus".into()))
        );
        assert_eq!(
            check_cron("0 0 30 2 *", "UTC"),
            Err(ScheduleError::NeverFires("0 0 30 2 *".into()))
        );
    }

    #[test]
    fn missed_tick_policies_show_as_stored() {
        assert_eq!(MissedTicks::Latest.to_string(), "latest");
        assert_eq!(MissedTicks::Skip.to_string(), "skip");
        assert_eq!(MissedTicks::All { max: 3 }.to_string(), "all:3");
    }

    #[test]
    fn descriptions_read_back() {
        for schedule in [
            Schedule::cron("a", "*/5 * * * *", "America/New_York").unwrap(),
            Schedule::every("b", Duration::from_secs(90)).unwrap(),
        ] {
            let back = Schedule::parse(schedule.name(), schedule.kind(), &schedule.describe())
                .unwrap()
                .missed(schedule.missed_ticks());
            assert_eq!(back, schedule);
        }
    }

    #[test]
    fn an_on_time_tick_is_enqueued_under_every_policy() {
        for missed in [
            MissedTicks::Latest,
            MissedTicks::Skip,
            MissedTicks::All { max: 5 },
        ] {
            let every = Schedule::every("t", Duration::from_secs(1))
                .unwrap()
                .missed(missed);
            let plan = every.plan(at("2026-01-01T00:00:09Z"), at("2026-01-01T00:00:10.004Z"));
            assert_eq!(plan.enqueue, [at("2026-01-01T00:00:10Z")], "{missed:?}");
            assert_eq!(plan.missed, 0);
        }
    }

    #[test]
    fn missed_ticks_follow_the_policy() {
        let last = at("2026-01-01T00:00:04Z");
        // Down from 00:00:04 until 00:00:10.3: 5 to 9 were missed, 10 is on time.
        let now = at("2026-01-01T00:00:10.300Z");
        let plan = |missed| {
            Schedule::every("t", Duration::from_secs(1))
                .unwrap()
                .missed(missed)
                .plan(last, now)
        };
        let latest = plan(MissedTicks::Latest);
        assert_eq!(
            latest.enqueue,
            [at("2026-01-01T00:00:09Z"), at("2026-01-01T00:00:10Z")]
        );
        assert_eq!(latest.advance_to, Some(at("2026-01-01T00:00:10Z")));
        assert_eq!(
            plan(MissedTicks::Skip).enqueue,
            [at("2026-01-01T00:00:10Z")]
        );
        let all: Vec<_> = (5..=10)
            .map(|second| at(&format!("2026-01-01T00:00:{second:02}Z")))
            .collect();
        assert_eq!(plan(MissedTicks::All { max: 10 }).enqueue, all);
        assert_eq!(plan(MissedTicks::All { max: 2 }).enqueue, all[3..]);
        assert_eq!(plan(MissedTicks::Latest).advance_to, Some(all[5]));
        let nothing = Schedule::every("t", Duration::from_secs(1))
            .unwrap()
            .plan(at("2026-01-01T00:00:10Z"), now);
        assert_eq!(nothing.advance_to, None);
    }

    #[test]
    fn a_late_daily_tick_within_a_minute_is_on_time() {
        let daily = Schedule::cron("d", "0 3 * * *", "UTC")
            .unwrap()
            .missed(MissedTicks::Skip);
        let last = at("2026-01-01T03:00:00Z");
        assert_eq!(
            daily.plan(last, at("2026-01-02T03:00:30Z")).enqueue,
            [at("2026-01-02T03:00:00Z")]
        );
        assert!(daily
            .plan(last, at("2026-01-02T03:30:00Z"))
            .enqueue
            .is_empty());
    }

    #[test]
    fn ticks_since_the_last_success_count_after_their_grace() {
        let every = Schedule::every("t", Duration::from_secs(2)).unwrap();
        let success = at("2026-01-01T00:00:00.5Z");
        let grace = Duration::from_secs(1);
        assert_eq!(
            every.ticks_since(success, at("2026-01-01T00:00:02.9Z"), grace, 10),
            0
        );
        assert_eq!(
            every.ticks_since(success, at("2026-01-01T00:00:03Z"), grace, 10),
            1
        );
        assert_eq!(
            every.ticks_since(success, at("2026-01-01T00:00:05Z"), grace, 10),
            2
        );
    }

    /// Every tick of `schedule` in `(after, until]`, oldest first.
    fn ticks_between(
        schedule: &Schedule,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Vec<DateTime<Utc>> {
        let mut ticks = schedule.ticks_back(after, until, 1_000);
        ticks.reverse();
        ticks
    }

    #[test]
    fn a_time_skipped_by_spring_forward_runs_once_when_the_clocks_resume() {
        // Europe/Paris, 2026-03-29: at 02:00 (01:00 UTC) the clocks jump to 03:00; 02:30 never
        // happens that day. The 02:30 job runs once, at 03:00 local (01:00 UTC), the first
        // instant after the gap, then at 02:30 local again the next day.
        let nightly = Schedule::cron("report", "30 2 * * *", "Europe/Paris").unwrap();
        assert_eq!(
            ticks_between(
                &nightly,
                at("2026-03-27T12:00:00Z"),
                at("2026-03-30T12:00:00Z")
            ),
            vec![
                at("2026-03-28T01:30:00Z"),
                at("2026-03-29T01:00:00Z"),
                at("2026-03-30T00:30:00Z"),
            ]
        );
        assert_eq!(
            nightly.next_tick_after(at("2026-03-28T12:00:00Z")),
            Some(at("2026-03-29T01:00:00Z"))
        );
        assert_eq!(
            nightly.previous_tick(at("2026-03-29T06:00:00Z")),
            Some(at("2026-03-29T01:00:00Z"))
        );
    }

    #[test]
    fn a_time_repeated_by_fall_back_runs_once() {
        // Europe/Paris, 2026-10-25: at 03:00 summer time (01:00 UTC) the clocks go back to
        // 02:00; 02:30 happens twice (00:30 and 01:30 UTC). The 02:30 job runs once, at the
        // first of them.
        let nightly = Schedule::cron("report", "30 2 * * *", "Europe/Paris").unwrap();
        assert_eq!(
            ticks_between(
                &nightly,
                at("2026-10-23T12:00:00Z"),
                at("2026-10-26T12:00:00Z")
            ),
            vec![
                at("2026-10-24T00:30:00Z"),
                at("2026-10-25T00:30:00Z"),
                at("2026-10-26T01:30:00Z"),
            ]
        );
        assert_eq!(
            nightly.next_tick_after(at("2026-10-25T00:30:00Z")),
            Some(at("2026-10-26T01:30:00Z"))
        );
    }

    #[test]
    fn hourly_cron_ticks_follow_the_real_hours_across_both_changes() {
        let hourly = Schedule::cron("sweep", "0 * * * *", "Europe/Paris").unwrap();
        // Spring forward: the local day has 23 hours, and so 23 ticks an hour apart.
        let spring = ticks_between(
            &hourly,
            at("2026-03-28T23:00:00Z"),
            at("2026-03-29T22:00:00Z"),
        );
        assert_eq!(spring.len(), 23, "{spring:?}");
        assert!(spring
            .windows(2)
            .all(|pair| pair[1] - pair[0] == TimeDelta::hours(1)));
        // Fall back: the local day has 25 hours; 02:00 local comes twice and ticks each time,
        // an hour apart like every other hour.
        let autumn = ticks_between(
            &hourly,
            at("2026-10-24T22:00:00Z"),
            at("2026-10-25T23:00:00Z"),
        );
        assert_eq!(autumn.len(), 25, "{autumn:?}");
        assert!(autumn
            .windows(2)
            .all(|pair| pair[1] - pair[0] == TimeDelta::hours(1)));
        // The pass just after the second 02:00 plans that one tick, once.
        let plan = hourly.plan(at("2026-10-25T00:00:00Z"), at("2026-10-25T01:00:00.5Z"));
        assert_eq!(plan.enqueue, vec![at("2026-10-25T01:00:00Z")]);
        assert_eq!(plan.missed, 0);
    }
}
