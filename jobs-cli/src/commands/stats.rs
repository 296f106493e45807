//! `jobs stats`: the health numbers as a table or JSON.

use std::time::Duration;

use jobs_postgres::admin::{
    self, Counts, HumanDuration, LimitStats, OutboxStats, QueuePause, RetainedCounts,
    ScheduleStats, Stats, EXACT_RETAINED_BOUND, MAX_COUNTED_TICKS,
};
use jobs_postgres::PgPool;
use serde_json::{json, Value};

use super::{json_text, Report};
use crate::error::CliError;
use crate::escape::shown;
use crate::table::{Align, Table};

/// Reads the numbers and renders them.
pub async fn run(pool: &PgPool, json: bool) -> Result<Report, CliError> {
    let stats = admin::stats(pool).await?;
    Ok(Report::success(if json {
        json_text(&to_json(&stats))
    } else {
        to_table(&stats)
    }))
}

fn to_table(stats: &Stats) -> String {
    let mut text = jobs_table(stats);
    if !stats.schedules.is_empty() {
        text.push('\n');
        text.push_str(&schedules_table(&stats.schedules));
    }
    if let Some(line) = outbox_line(&stats.outbox) {
        text.push('\n');
        text.push_str(&line);
    }
    if !stats.paused.is_empty() {
        text.push('\n');
        text.push_str(&pauses_lines(&stats.paused));
    }
    if !stats.limits.is_empty() {
        text.push('\n');
        text.push_str(&limits_lines(&stats.limits));
    }
    text.push('\n');
    text.push_str(&workers_line(stats));
    text
}

/// One line per limited kind: each limit with how much of it is in use, and the due jobs it
/// holds back.
fn limits_lines(limits: &[LimitStats]) -> String {
    limits
        .iter()
        .map(|limit| {
            let mut parts = Vec::new();
            if let Some(max) = limit.limits.max_running {
                parts.push(format!("{}/{max} running", limit.running));
            }
            if let Some(rate) = limit.limits.rate_limit {
                parts.push(format!(
                    "{}/{} started in the last {}",
                    limit.started_in_window,
                    rate.jobs(),
                    HumanDuration(rate.per())
                ));
            }
            let per_key: Vec<String> = [
                limit
                    .limits
                    .max_running_per_key
                    .map(|max| format!("{max} running")),
                limit
                    .limits
                    .rate_limit_per_key
                    .map(|rate| format!("{rate} started")),
            ]
            .into_iter()
            .flatten()
            .collect();
            if !per_key.is_empty() {
                parts.push(format!(
                    "{} at their limit of {} per key",
                    super::count(limit.keys_at_limit as usize, "key"),
                    per_key.join(" or ")
                ));
            }
            let held = match limit.held_back {
                0 => String::from("none held back"),
                held => format!("{} held back", super::count(held as usize, "due job")),
            };
            let disagree = if limit.workers_disagree {
                "; live workers declare different limits for it"
            } else {
                ""
            };
            format!(
                "limit: kind {}: {}; {held}{disagree}\n",
                shown(&limit.limits.kind),
                parts.join(", ")
            )
        })
        .collect()
}

/// How many workers are live, and the queues they serve (`jobs workers` lists them).
fn workers_line(stats: &Stats) -> String {
    let mut queues: Vec<&str> = stats
        .workers
        .iter()
        .flat_map(|worker| worker.queues.iter().map(|queue| queue.queue.as_str()))
        .collect();
    queues.sort_unstable();
    queues.dedup();
    match stats.workers.len() {
        0 => "workers: none live\n".to_owned(),
        live => format!(
            "workers: {} live, serving {} ({}); `jobs workers` lists them\n",
            live,
            super::count(queues.len(), "queue"),
            shown(&queues.join(", "))
        ),
    }
}

/// One line per paused queue: since when, by whom, why.
fn pauses_lines(pauses: &[QueuePause]) -> String {
    pauses
        .iter()
        .map(|pause| {
            let reason = pause
                .reason
                .as_deref()
                .map(|reason| format!(": {}", shown(reason)))
                .unwrap_or_default();
            format!(
                "paused: queue {} for {} by {}{reason}\n",
                shown(&pause.queue),
                HumanDuration(pause.paused_for),
                shown(&pause.paused_by)
            )
        })
        .collect()
}

/// One line on the outbox, or none when it holds nothing unpublished or parked.
fn outbox_line(outbox: &OutboxStats) -> Option<String> {
    if outbox.unpublished == 0 && outbox.parked == 0 {
        return None;
    }
    let oldest = outbox
        .oldest_unpublished_age
        .map_or_else(String::new, |age| {
            format!(", the oldest written {} ago", HumanDuration(round(age)))
        });
    Some(format!(
        "outbox: {} unpublished{oldest}; {} parked\n",
        outbox.unpublished, outbox.parked
    ))
}

fn schedules_table(schedules: &[ScheduleStats]) -> String {
    let mut table = Table::new(&[
        ("SCHEDULE", Align::Left),
        ("KIND", Align::Left),
        ("WHEN", Align::Left),
        ("MISSED", Align::Left),
        ("LAST TICK", Align::Left),
        ("LAST SUCCESS", Align::Left),
        ("TICKS SINCE", Align::Right),
    ]);
    for schedule in schedules {
        let last_tick = (schedule.checked_at - schedule.last_tick_at)
            .to_std()
            .map_or_else(
                |_| "-".to_owned(),
                |ago| format!("{} ago", HumanDuration(round(ago))),
            );
        table.row(vec![
            schedule.name.clone(),
            schedule.kind.clone(),
            schedule.description.clone(),
            schedule.missed.clone(),
            last_tick,
            schedule.last_success_ago().map_or_else(
                || "never".to_owned(),
                |ago| format!("{} ago", HumanDuration(round(ago))),
            ),
            ticks_since(schedule),
        ]);
    }
    let mut text = table.render();
    text.push_str("TICKS SINCE: ticks since the last success (or since registered, without one)\n");
    text
}

fn ticks_since(schedule: &ScheduleStats) -> String {
    match schedule.ticks_since_success(Duration::ZERO) {
        Ok(ticks) if ticks >= MAX_COUNTED_TICKS => format!("{ticks}+"),
        Ok(ticks) => ticks.to_string(),
        Err(_) => "?".to_owned(),
    }
}

fn jobs_table(stats: &Stats) -> String {
    if stats.kinds.is_empty() {
        return "no jobs\n".to_owned();
    }
    let (done, cancelled) = match stats.retained {
        RetainedCounts::Estimated => ("DONE~", "CANCELLED~"),
        RetainedCounts::Counted | RetainedCounts::Unknown => ("DONE", "CANCELLED"),
    };
    let mut table = Table::new(&[
        ("QUEUE", Align::Left),
        ("KIND", Align::Left),
        ("WAITING", Align::Right),
        ("READY", Align::Right),
        ("SCHEDULED", Align::Right),
        ("RUNNING", Align::Right),
        ("EXPIRED", Align::Right),
        ("DEAD", Align::Right),
        (done, Align::Right),
        (cancelled, Align::Right),
        ("OLDEST READY", Align::Left),
    ]);
    for kind in &stats.kinds {
        table.row(cells(&kind.queue, &kind.kind, &kind.counts, stats.retained));
    }
    if stats.kinds.len() > 1 {
        table.row(cells("total", "", &stats.total(), stats.retained));
    }
    let mut text = table.render();
    text.push_str(&match (stats.retained, stats.analyzed_ago) {
        (RetainedCounts::Counted, _) => String::new(),
        (RetainedCounts::Estimated, Some(ago)) => format!(
            "~ estimated from the planner's statistics, gathered {} ago\n",
            HumanDuration(round(ago))
        ),
        (RetainedCounts::Estimated, None) => {
            "~ estimated from the planner's statistics\n".to_owned()
        }
        (RetainedCounts::Unknown, _) => format!(
            "? more than {EXACT_RETAINED_BOUND} done and cancelled jobs, and no estimate yet: the \
             table has not been analyzed (`ANALYZE jobs_queue`), or this role does not own it\n"
        ),
    });
    text
}

fn cells(queue: &str, kind: &str, counts: &Counts, retained: RetainedCounts) -> Vec<String> {
    let retained_count = |count: u64| match retained {
        RetainedCounts::Unknown => "?".to_owned(),
        RetainedCounts::Counted | RetainedCounts::Estimated => count.to_string(),
    };
    vec![
        queue.to_owned(),
        kind.to_owned(),
        counts.waiting.to_string(),
        counts.ready.to_string(),
        counts.scheduled.to_string(),
        counts.running.to_string(),
        counts.expired_leases.to_string(),
        counts.dead.to_string(),
        retained_count(counts.done),
        retained_count(counts.cancelled),
        counts.oldest_ready_age.map_or_else(
            || "-".to_owned(),
            |age| HumanDuration(round(age)).to_string(),
        ),
    ]
}

/// To the second: sub-second parts of an age are noise in a table.
fn round(age: Duration) -> Duration {
    Duration::from_secs(age.as_secs())
}

fn to_json(stats: &Stats) -> Value {
    let kinds: Vec<Value> = stats
        .kinds
        .iter()
        .map(|kind| {
            let mut value = counts_json(&kind.counts, stats.retained);
            value["queue"] = json!(kind.queue);
            value["kind"] = json!(kind.kind);
            value
        })
        .collect();
    let schedules: Vec<Value> = stats
        .schedules
        .iter()
        .map(|schedule| {
            json!({
                "name": schedule.name,
                "kind": schedule.kind,
                "queue": schedule.queue,
                "when": schedule.description,
                "missed": schedule.missed,
                "last_tick_at": schedule.last_tick_at.to_rfc3339(),
                "last_success_at": schedule.last_success_at.map(|at| at.to_rfc3339()),
                "ticks_since_success": schedule.ticks_since_success(Duration::ZERO).ok(),
            })
        })
        .collect();
    json!({
        "kinds": kinds,
        "schedules": schedules,
        "outbox": {
            "unpublished": stats.outbox.unpublished,
            "oldest_unpublished_secs": stats.outbox.oldest_unpublished_age.map(|age| age.as_secs_f64()),
            "parked": stats.outbox.parked,
        },
        "paused": stats.paused.iter().map(|pause| json!({
            "queue": pause.queue,
            "paused_at": pause.paused_at.to_rfc3339(),
            "paused_secs": pause.paused_for.as_secs_f64(),
            "paused_by": pause.paused_by,
            "reason": pause.reason,
        })).collect::<Vec<_>>(),
        "limits": stats.limits.iter().map(|limit| json!({
            "kind": limit.limits.kind,
            "max_running": limit.limits.max_running,
            "running": limit.running,
            "rate_limit": limit.limits.rate_limit.map(|rate| rate.to_string()),
            "started_in_window": limit.started_in_window,
            "max_running_per_key": limit.limits.max_running_per_key,
            "rate_limit_per_key": limit.limits.rate_limit_per_key.map(|rate| rate.to_string()),
            "keys_at_limit": limit.keys_at_limit,
            "due": limit.due,
            "held_back": limit.held_back,
            "workers_disagree": limit.workers_disagree,
        })).collect::<Vec<_>>(),
        "total": counts_json(&stats.total(), stats.retained),
        "live_workers": stats.workers.len(),
        "retained": match stats.retained {
            RetainedCounts::Counted => "counted",
            RetainedCounts::Estimated => "estimated",
            RetainedCounts::Unknown => "unknown",
        },
        "estimated": stats.retained == RetainedCounts::Estimated,
        "analyzed_secs_ago": stats.analyzed_ago.map(|ago| ago.as_secs_f64()),
    })
}

/// The counts as JSON; done and cancelled are `null` when unknown.
fn counts_json(counts: &Counts, retained: RetainedCounts) -> Value {
    let retained_count = |count: u64| (retained != RetainedCounts::Unknown).then_some(count);
    json!({
        "waiting": counts.waiting,
        "ready": counts.ready,
        "scheduled": counts.scheduled,
        "running": counts.running,
        "expired_leases": counts.expired_leases,
        "dead": counts.dead,
        "done": retained_count(counts.done),
        "cancelled": retained_count(counts.cancelled),
        "oldest_ready_secs": counts.oldest_ready_age.map(|age| age.as_secs_f64()),
        "longest_expired_lease_secs": counts.longest_expired_lease.map(|age| age.as_secs_f64()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobs_postgres::admin::KindLimits;

    fn limit(kind: &str, max_running: Option<u32>, rate: Option<&str>) -> LimitStats {
        LimitStats {
            limits: KindLimits {
                kind: kind.to_owned(),
                max_running,
                rate_limit: rate.map(|rate| rate.parse().unwrap()),
                max_running_per_key: None,
                rate_limit_per_key: None,
            },
            workers_disagree: false,
            running: 2,
            started_in_window: 100,
            due: 345,
            keys_at_limit: 0,
            held_back: 0,
        }
    }

    #[test]
    fn each_limited_kind_shows_its_limits_in_use_and_what_they_hold_back() {
        let mut webhooks = limit("deliver_webhook", None, Some("100/1s"));
        webhooks.held_back = 345;
        let mut exports = limit("export", Some(4), Some("1000/1h"));
        exports.workers_disagree = true;
        let mut charges = limit("charge", None, None);
        charges.limits.max_running_per_key = Some(2);
        charges.keys_at_limit = 3;
        charges.held_back = 41;
        assert_eq!(
            limits_lines(&[webhooks, exports, charges]),
            "limit: kind deliver_webhook: 100/100 started in the last 1s; 345 due jobs held back\n\
             limit: kind export: 2/4 running, 100/1000 started in the last 1h; none held back; \
             live workers declare different limits for it\n\
             limit: kind charge: 3 keys at their limit of 2 running per key; 41 due jobs held back\n"
        );
    }
}
