//! What a worker will run, decided before anything starts: which producers claim which kinds
//! from which queues, with what concurrency, and which queues' notifications wake each. Pure: no
//! database and no task; [`supervise`](super::supervise) starts what the plan says.

use std::collections::BTreeMap;
use std::time::Duration;

use jobs_core::RateLimit;

use super::producer::{Claim, QueuePlan};
use crate::admin::KindLimits;
use crate::store::ClaimLimits;

/// A kind the worker runs, as the plan needs it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KindToRun {
    /// Its name.
    pub(crate) name: &'static str,
    /// Its own queue (`#[job(queue = ..)]`).
    pub(crate) queue: &'static str,
    /// Most jobs of it running at once across all workers, if limited.
    pub(crate) max_running: Option<u32>,
    /// Most jobs of it started in any window of the limit's length across all workers, if
    /// limited.
    pub(crate) rate_limit: Option<RateLimit>,
    /// Whether its jobs are claimed round-robin across their fairness keys.
    pub(crate) fair: bool,
    /// Most jobs of it with the same limit key running at once across all workers, if limited.
    pub(crate) max_running_per_key: Option<u32>,
    /// Most jobs of it with the same limit key started in any window of the limit's length
    /// across all workers, if limited.
    pub(crate) rate_limit_per_key: Option<RateLimit>,
    /// Its lease.
    pub(crate) lease: Duration,
}

impl KindToRun {
    /// Its limits, as workers declare them (and as a producer's name shows them: "at most 2
    /// running, at most 100/1s started").
    pub(crate) fn limits(&self) -> KindLimits {
        KindLimits {
            kind: self.name.to_owned(),
            max_running: self.max_running,
            rate_limit: self.rate_limit,
            max_running_per_key: self.max_running_per_key,
            rate_limit_per_key: self.rate_limit_per_key,
        }
    }
}

/// The producers for `kinds` on `queues` (name to concurrency).
///
/// Kinds without a limit share one producer per queue, claiming any of them. Each kind with a
/// limit (on its running jobs, on their rate, or both) gets a producer of its own across all
/// the queues, so that the lock its claims take never slows the claims of the other kinds; its
/// concurrency is its running limit, or without one the concurrency of its own queue. Each kind
/// with a fairness key gets a producer of its own per queue, with the queue's concurrency, so
/// that its round-robin cursor is the queue's. The slots of these producers are their own, apart
/// from the queues' slots. A kind with a per-key limit gets a producer of its own per queue
/// too, with the queue's concurrency (at most its running limit), for the same reason.
pub(crate) fn plan_producers(
    kinds: &[KindToRun],
    queues: &BTreeMap<String, usize>,
) -> Vec<QueuePlan> {
    let (fair, unfair): (Vec<&KindToRun>, Vec<&KindToRun>) =
        kinds.iter().partition(|kind| kind.fair);
    let (key_limited, others): (Vec<&KindToRun>, Vec<&KindToRun>) = unfair
        .into_iter()
        .partition(|kind| kind.max_running_per_key.is_some() || kind.rate_limit_per_key.is_some());
    let (limited, unlimited): (Vec<&KindToRun>, Vec<&KindToRun>) = others
        .into_iter()
        .partition(|kind| kind.max_running.is_some() || kind.rate_limit.is_some());
    let mut plans = Vec::new();
    if !unlimited.is_empty() {
        let names: Vec<&'static str> = unlimited.iter().map(|kind| kind.name).collect();
        let leases: Vec<Duration> = unlimited.iter().map(|kind| kind.lease).collect();
        for (queue, concurrency) in queues {
            plans.push(QueuePlan {
                name: queue.clone(),
                claim: Claim::Queue {
                    queue: queue.clone(),
                    kinds: names.clone(),
                    leases: leases.clone(),
                },
                concurrency: *concurrency,
                woken_by: vec![queue.clone()],
            });
        }
    }
    for kind in fair {
        for (queue, concurrency) in queues {
            plans.push(QueuePlan {
                name: format!("{} (fair share) in {queue}", kind.name),
                claim: Claim::Fair {
                    kind: kind.name,
                    queue: queue.clone(),
                    lease: kind.lease,
                },
                concurrency: *concurrency,
                woken_by: vec![queue.clone()],
            });
        }
    }
    for kind in key_limited {
        let limits = ClaimLimits {
            max_running: kind.max_running,
            rate_limit: kind.rate_limit,
            max_running_per_key: kind.max_running_per_key,
            rate_limit_per_key: kind.rate_limit_per_key,
        };
        for (queue, concurrency) in queues {
            let concurrency = match kind.max_running {
                Some(max_running) => {
                    (*concurrency).min(usize::try_from(max_running).unwrap_or(usize::MAX))
                }
                None => *concurrency,
            };
            plans.push(QueuePlan {
                name: format!("{} ({}) in {queue}", kind.name, kind.limits()),
                claim: Claim::KeyLimited {
                    kind: kind.name,
                    queue: queue.clone(),
                    limits,
                    lease: kind.lease,
                },
                concurrency,
                woken_by: vec![queue.clone()],
            });
        }
    }
    let queue_names: Vec<String> = queues.keys().cloned().collect();
    for kind in limited {
        plans.push(QueuePlan {
            name: format!("{} ({})", kind.name, kind.limits()),
            claim: Claim::Limited {
                kind: kind.name,
                queues: queue_names.clone(),
                max_running: kind.max_running,
                rate_limit: kind.rate_limit,
                lease: kind.lease,
            },
            concurrency: match kind.max_running {
                Some(max_running) => usize::try_from(max_running).unwrap_or(usize::MAX),
                None => queues.get(kind.queue).copied().unwrap_or(1),
            },
            woken_by: queue_names.clone(),
        });
    }
    plans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(name: &'static str, max_running: Option<u32>, lease_secs: u64) -> KindToRun {
        KindToRun {
            name,
            queue: "default",
            max_running,
            rate_limit: None,
            fair: false,
            max_running_per_key: None,
            rate_limit_per_key: None,
            lease: Duration::from_secs(lease_secs),
        }
    }

    fn queues(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
        pairs
            .iter()
            .map(|(name, concurrency)| (name.to_string(), *concurrency))
            .collect()
    }

    #[test]
    fn kinds_without_a_limit_share_one_producer_per_queue() {
        let plans = plan_producers(
            &[kind("email", None, 30), kind("thumbnail", None, 300)],
            &queues(&[("default", 16), ("media", 4)]),
        );
        assert_eq!(plans.len(), 2);
        assert_eq!(plans[0].name, "default");
        assert_eq!(plans[0].concurrency, 16);
        assert_eq!(plans[0].woken_by, ["default"]);
        assert_eq!(
            plans[0].claim,
            Claim::Queue {
                queue: "default".into(),
                kinds: vec!["email", "thumbnail"],
                leases: vec![Duration::from_secs(30), Duration::from_secs(300)],
            }
        );
        assert_eq!(plans[1].name, "media");
        assert_eq!(plans[1].concurrency, 4);
        assert_eq!(plans[1].woken_by, ["media"]);
    }

    #[test]
    fn a_limited_kind_gets_a_producer_of_its_own_across_every_queue() {
        let plans = plan_producers(
            &[kind("email", None, 30), kind("export", Some(2), 600)],
            &queues(&[("default", 16), ("reports", 1)]),
        );
        assert_eq!(plans.len(), 3, "two queue producers and the limited kind's");
        let limited = &plans[2];
        assert_eq!(limited.name, "export (at most 2 running)");
        assert_eq!(limited.concurrency, 2);
        assert_eq!(limited.woken_by, ["default", "reports"]);
        assert_eq!(
            limited.claim,
            Claim::Limited {
                kind: "export",
                queues: vec!["default".into(), "reports".into()],
                max_running: Some(2),
                rate_limit: None,
                lease: Duration::from_secs(600),
            }
        );
        for plan in &plans[..2] {
            let Claim::Queue { kinds, .. } = &plan.claim else {
                panic!("a queue producer: {plan:?}");
            };
            assert_eq!(kinds, &["email"], "the limited kind is claimed apart");
        }
    }

    #[test]
    fn only_limited_kinds_start_no_queue_producer() {
        let plans = plan_producers(&[kind("export", Some(1), 600)], &queues(&[("default", 16)]));
        assert_eq!(plans.len(), 1);
        assert!(matches!(plans[0].claim, Claim::Limited { .. }));
    }

    #[test]
    fn a_rate_limited_kind_gets_a_producer_of_its_own_as_wide_as_its_queue() {
        let limit = RateLimit::parse("100/1s").unwrap();
        let mut webhook = kind("webhook", None, 30);
        webhook.queue = "hooks";
        webhook.rate_limit = Some(limit);
        let mut export = kind("export", Some(2), 600);
        export.rate_limit = Some(limit);
        let plans = plan_producers(
            &[kind("email", None, 30), webhook, export],
            &queues(&[("default", 16), ("hooks", 4)]),
        );
        assert_eq!(
            plans.len(),
            4,
            "two queue producers and one per limited kind"
        );
        assert_eq!(plans[2].name, "webhook (at most 100/1s started)");
        assert_eq!(plans[2].concurrency, 4, "the concurrency of its own queue");
        assert_eq!(
            plans[2].claim,
            Claim::Limited {
                kind: "webhook",
                queues: vec!["default".into(), "hooks".into()],
                max_running: None,
                rate_limit: Some(limit),
                lease: Duration::from_secs(30),
            }
        );
        assert_eq!(
            plans[3].name,
            "export (at most 2 running, at most 100/1s started)"
        );
        assert_eq!(plans[3].concurrency, 2);
    }

    #[test]
    fn a_fair_kind_gets_a_producer_of_its_own_in_each_queue() {
        let mut tenant_export = kind("tenant_export", None, 60);
        tenant_export.fair = true;
        let plans = plan_producers(
            &[kind("email", None, 30), tenant_export],
            &queues(&[("default", 16), ("media", 4)]),
        );
        assert_eq!(
            plans.len(),
            4,
            "two queue producers and the fair kind's two"
        );
        assert_eq!(plans[2].name, "tenant_export (fair share) in default");
        assert_eq!(plans[2].concurrency, 16);
        assert_eq!(plans[2].woken_by, ["default"]);
        assert_eq!(
            plans[3].claim,
            Claim::Fair {
                kind: "tenant_export",
                queue: "media".into(),
                lease: Duration::from_secs(60),
            }
        );
        assert_eq!(plans[3].concurrency, 4);
        for plan in &plans[..2] {
            let Claim::Queue { kinds, .. } = &plan.claim else {
                panic!("a queue producer: {plan:?}");
            };
            assert_eq!(kinds, &["email"], "the fair kind is claimed apart");
        }
    }
}
