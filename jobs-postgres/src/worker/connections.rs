//! How many pool connections a worker can hold at once, counted from what its tasks really take,
//! and the warning [`build`](super::WorkerBuilder::build) logs when the pool is smaller: jobs
//! would then wait for a connection, and the pool's timeout would fail them as transient errors.

use super::producer::QueuePlan;
use super::{Completion, WorkerConfig};

/// The connections a worker can hold at once, by who holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnectionNeed {
    /// Jobs running at once, all producers together: each may hold one, for
    /// `ctx.transaction()`, renewing its lease, or writing its outcome (one statement per job).
    pub(crate) running_jobs: usize,
    /// Producers: each claims with one connection.
    pub(crate) producers: usize,
    /// The worker's own tasks that take one each, by name: listener (held all along),
    /// heartbeat, rescuer, presence, completer, scheduler, retention, gauges, relays.
    pub(crate) services: Vec<&'static str>,
}

impl ConnectionNeed {
    /// All of them.
    pub(crate) fn total(&self) -> usize {
        self.running_jobs + self.producers + self.services.len()
    }

    /// Why a pool of `max_connections` is too small for this need, or `None` if it is enough.
    pub(crate) fn shortfall(&self, max_connections: u32) -> Option<String> {
        let total = self.total();
        if usize::try_from(max_connections).is_ok_and(|max| max >= total) {
            return None;
        }
        Some(format!(
            "the pool holds at most {max_connections} connections, but this worker can use \
             {total} at once ({} for running jobs, {} for claiming, {} for its {}): jobs would \
             wait for a connection and fail with a pool timeout; build the pool with \
             `PgPoolOptions::new().max_connections({total})` (plus what the application uses), \
             or lower the queues' concurrency",
            self.running_jobs,
            self.producers,
            self.services.len(),
            self.services.join(", "),
        ))
    }
}

/// What a worker running `plans`, with `config`, `schedules` schedules and `relays` outbox relays
/// can hold at once.
pub(crate) fn connections_needed(
    plans: &[QueuePlan],
    config: &WorkerConfig,
    schedules: usize,
    relays: usize,
) -> ConnectionNeed {
    let mut services = Vec::new();
    if config.listen {
        services.push("listener");
    }
    services.extend(["heartbeat", "rescuer", "presence"]);
    if matches!(config.completion, Completion::Batched { .. }) {
        services.push("completer");
    }
    if schedules > 0 {
        services.push("scheduler");
    }
    if config.retention.is_some() {
        services.push("retention");
    }
    if config.gauges_interval.is_some() {
        services.push("gauges");
    }
    services.extend(std::iter::repeat_n("relay", relays));
    ConnectionNeed {
        running_jobs: plans.iter().map(|plan| plan.concurrency).sum(),
        producers: plans.len(),
        services,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::producer::Claim;

    fn plan(queue: &str, concurrency: usize) -> QueuePlan {
        QueuePlan {
            name: queue.to_string(),
            claim: Claim::Queue {
                queue: queue.to_string(),
                kinds: vec!["email"],
                leases: vec![std::time::Duration::from_secs(30)],
            },
            concurrency,
            woken_by: vec![queue.to_string()],
        }
    }

    #[test]
    fn the_defaults_need_more_than_sqlx_default_pool() {
        let need = connections_needed(&[plan("default", 16)], &WorkerConfig::default(), 0, 0);
        assert_eq!(
            need.services,
            [
                "listener",
                "heartbeat",
                "rescuer",
                "presence",
                "completer",
                "retention",
                "gauges"
            ]
        );
        assert_eq!(need.total(), 16 + 1 + 7);
        let message = need.shortfall(10).expect("10 connections are too few");
        assert!(
            message.contains("at most 10 connections, but this worker can use 24 at once"),
            "{message}"
        );
        assert!(message.contains("max_connections(24)"), "{message}");
        assert_eq!(need.shortfall(24), None);
    }

    #[test]
    fn every_producer_schedule_relay_and_setting_counts() {
        let config = WorkerConfig {
            listen: false,
            completion: Completion::PerJob,
            retention: None,
            gauges_interval: None,
            ..WorkerConfig::default()
        };
        let need = connections_needed(&[plan("default", 4), plan("media", 2)], &config, 3, 2);
        assert_eq!(
            need,
            ConnectionNeed {
                running_jobs: 6,
                producers: 2,
                services: vec![
                    "heartbeat",
                    "rescuer",
                    "presence",
                    "scheduler",
                    "relay",
                    "relay"
                ],
            }
        );
        assert_eq!(need.total(), 14);
    }
}
