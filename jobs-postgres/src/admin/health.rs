//! Alerting on the health numbers: see [`check`].

use std::fmt;
use std::time::Duration;

use jobs_core::JobId;

use super::{BlockingJob, HumanDuration, Stats};

/// What counts as unhealthy. The defaults are what `jobs check` alerts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthThresholds {
    /// Most dead jobs a kind may have. Default 0: any dead job needs an operator (replay it once
    /// the cause is fixed, or discard it).
    pub max_dead: u64,
    /// Longest a due job may wait for a worker. Default 5 minutes: longer means the workers are
    /// down, too few, or stuck.
    pub max_ready_age: Duration,
    /// Longest a lease may stay expired without a rescue. Default 1 minute: rescue sweeps every
    /// 5 s by default, so an older expired lease means no worker is running the rescue.
    pub max_expired_lease_age: Duration,
    /// How long a tick's run gets to succeed before the tick counts against its schedule.
    /// Default 1 minute. A schedule is missing runs when two ticks have come due, each more
    /// than this long ago, since its last success: two periods without one.
    pub schedule_grace: Duration,
    /// Longest an outbox row may wait to be published. Default 5 minutes: longer means no relay
    /// is running (one that quietly died), or the broker has been unreachable that long.
    pub max_unpublished_age: Duration,
    /// Most parked outbox rows there may be. Default 0: a parked row is an event other systems
    /// never got, and needs an operator (replay it once the cause is fixed).
    pub max_parked: u64,
    /// Longest a queue may stay paused. Default 1 hour: a pause is meant to be short (a failing
    /// provider, an incident), and one forgotten leaves its jobs waiting for good. While a queue
    /// is paused, its waiting jobs are not reported as [`Violation::ReadyTooOld`]: the pause is.
    pub max_paused: Duration,
    /// Longest due jobs may wait while no live worker can claim them: none serves their queue
    /// ([`Violation::QueueUnserved`]), or none that serves it runs their kind
    /// ([`Violation::KindWithoutWorker`]). Default 1 minute, which a rolling restart stays
    /// under. Such jobs are reported that way instead of as [`Violation::ReadyTooOld`]. Paused
    /// queues are not judged: the pause is their alert.
    pub max_unserved_age: Duration,
    /// Longest a job may wait for other jobs (its prerequisites, or its batch's members), and
    /// a batch may stay open. Default 1 hour: longer means a workflow is stuck behind a job
    /// that keeps failing, or that no worker runs. Judged on the
    /// [`STUCK_LISTED`](super::STUCK_LISTED) longest waiting jobs and open batches
    /// ([`Stats::longest_waiting`], [`Stats::longest_open_batches`]).
    pub max_waiting_age: Duration,
}

impl Default for HealthThresholds {
    fn default() -> Self {
        Self {
            max_dead: 0,
            max_ready_age: Duration::from_secs(5 * 60),
            max_expired_lease_age: Duration::from_secs(60),
            schedule_grace: Duration::from_secs(60),
            max_unpublished_age: Duration::from_secs(5 * 60),
            max_parked: 0,
            max_paused: Duration::from_secs(60 * 60),
            max_unserved_age: Duration::from_secs(60),
            max_waiting_age: Duration::from_secs(60 * 60),
        }
    }
}

/// One threshold crossed by one kind of one queue. Its `Display` is one line naming the kind,
/// the queue, the number and the threshold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// More dead jobs than [`HealthThresholds::max_dead`].
    Dead {
        /// The queue.
        queue: String,
        /// The job kind.
        kind: String,
        /// Its dead jobs.
        dead: u64,
        /// The threshold.
        max: u64,
    },
    /// A due job has waited longer than [`HealthThresholds::max_ready_age`].
    ReadyTooOld {
        /// The queue.
        queue: String,
        /// The job kind.
        kind: String,
        /// How long the oldest due job has waited.
        age: Duration,
        /// Its due jobs.
        ready: u64,
        /// The threshold.
        max: Duration,
    },
    /// A lease has stayed expired longer than [`HealthThresholds::max_expired_lease_age`].
    LeasesNotRescued {
        /// The queue.
        queue: String,
        /// The job kind.
        kind: String,
        /// Its running jobs with an expired lease.
        expired: u64,
        /// How long ago the longest-expired lease expired.
        longest: Duration,
        /// The threshold.
        max: Duration,
    },
    /// A schedule has had no successful run for two of its periods (each tick given
    /// [`HealthThresholds::schedule_grace`]).
    ScheduleMissing {
        /// The schedule.
        schedule: String,
        /// The kind it enqueues.
        kind: String,
        /// When it ticks.
        description: String,
        /// Ticks since its last success (at most [`MAX_COUNTED_TICKS`](super::MAX_COUNTED_TICKS)).
        ticks: usize,
        /// How long ago it last succeeded; `None` if it never has since it was registered.
        last_success: Option<Duration>,
    },
    /// An outbox row has waited to be published longer than
    /// [`HealthThresholds::max_unpublished_age`].
    OutboxBehind {
        /// Unpublished rows.
        unpublished: u64,
        /// How long ago the oldest was written.
        age: Duration,
        /// The threshold.
        max: Duration,
    },
    /// More parked outbox rows than [`HealthThresholds::max_parked`].
    OutboxParked {
        /// Parked rows.
        parked: u64,
        /// The threshold.
        max: u64,
    },
    /// A queue has been paused longer than [`HealthThresholds::max_paused`].
    QueuePaused {
        /// The queue.
        queue: String,
        /// How long it has been paused.
        paused_for: Duration,
        /// Who paused it.
        paused_by: String,
        /// Its jobs waiting to run (due now or later).
        waiting: u64,
        /// The threshold.
        max: Duration,
    },
    /// Due jobs of a queue have waited longer than [`HealthThresholds::max_unserved_age`] and no
    /// live worker claims from that queue.
    QueueUnserved {
        /// The queue.
        queue: String,
        /// Its due jobs, all kinds.
        ready: u64,
        /// How long the oldest has waited.
        age: Duration,
        /// The threshold.
        max: Duration,
    },
    /// Due jobs of a kind have waited longer than [`HealthThresholds::max_unserved_age`], and
    /// of the live workers that claim from their queue none runs that kind (a worker missing,
    /// or a kind left out of a deploy).
    KindWithoutWorker {
        /// The queue.
        queue: String,
        /// The job kind.
        kind: String,
        /// Its due jobs.
        ready: u64,
        /// How long the oldest has waited.
        age: Duration,
        /// The threshold.
        max: Duration,
    },
    /// A job has waited for other jobs longer than [`HealthThresholds::max_waiting_age`].
    WorkflowStuck {
        /// The waiting job.
        job: JobId,
        /// Its kind.
        kind: String,
        /// Its queue.
        queue: String,
        /// How long it has waited.
        waiting_for: Duration,
        /// The prerequisite it still waits for (the first by id); `None` for a batch's
        /// callback, which waits for the batch.
        waits_for: Option<BlockingJob>,
        /// The batch whose callback it is, if it is one.
        callback_of: Option<i64>,
        /// The threshold.
        max: Duration,
    },
    /// A batch has stayed open (members pending) longer than
    /// [`HealthThresholds::max_waiting_age`].
    BatchOpen {
        /// The batch.
        batch: i64,
        /// Its callback, if any.
        callback: Option<JobId>,
        /// How long it has been open.
        open_for: Duration,
        /// Its members not ended yet.
        pending: u64,
        /// The threshold.
        max: Duration,
    },
}

/// Ticks since a schedule's last success, with their grace passed, from which it is reported as
/// missing runs: two periods without a success.
pub const MISSING_AFTER_TICKS: usize = 2;

impl Violation {
    /// A short, stable name of the threshold crossed: `dead`, `ready_age`, `expired_leases`,
    /// `schedule_missing`, `outbox_age`, `outbox_parked`, `queue_paused`, `queue_unserved`,
    /// `kind_without_worker`, `workflow_stuck` or `batch_open`.
    pub fn name(&self) -> &'static str {
        match self {
            Violation::Dead { .. } => "dead",
            Violation::ReadyTooOld { .. } => "ready_age",
            Violation::LeasesNotRescued { .. } => "expired_leases",
            Violation::ScheduleMissing { .. } => "schedule_missing",
            Violation::OutboxBehind { .. } => "outbox_age",
            Violation::OutboxParked { .. } => "outbox_parked",
            Violation::QueuePaused { .. } => "queue_paused",
            Violation::QueueUnserved { .. } => "queue_unserved",
            Violation::KindWithoutWorker { .. } => "kind_without_worker",
            Violation::WorkflowStuck { .. } => "workflow_stuck",
            Violation::BatchOpen { .. } => "batch_open",
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Dead {
                queue,
                kind,
                dead,
                max,
            } => write!(
                f,
                "dead: {dead} dead job{} of kind {kind} in queue {queue} (at most {max} allowed)",
                plural(*dead)
            ),
            Violation::ReadyTooOld {
                queue,
                kind,
                age,
                ready,
                max,
            } => write!(
                f,
                "ready_age: the oldest of {ready} ready job{} of kind {kind} in queue {queue} has waited {} (at most {} allowed)",
                plural(*ready),
                HumanDuration(*age),
                HumanDuration(*max)
            ),
            Violation::LeasesNotRescued {
                queue,
                kind,
                expired,
                longest,
                max,
            } => write!(
                f,
                "expired_leases: {expired} running job{} of kind {kind} in queue {queue} with an expired lease, the oldest expired {} ago and not rescued (at most {} allowed): is any worker running?",
                plural(*expired),
                HumanDuration(*longest),
                HumanDuration(*max)
            ),
            Violation::ScheduleMissing {
                schedule,
                kind,
                description,
                ticks,
                last_success,
            } => {
                let last = match last_success {
                    Some(ago) => format!("last success {} ago", HumanDuration(*ago)),
                    None => String::from("no success since it was registered"),
                };
                write!(
                    f,
                    "schedule_missing: schedule {schedule} (kind {kind}, {description}) has missed {ticks} run{} in a row ({last}): are its jobs failing, or is no worker scheduling it?",
                    plural(u64::try_from(*ticks).unwrap_or(u64::MAX))
                )
            }
            Violation::OutboxBehind {
                unpublished,
                age,
                max,
            } => write!(
                f,
                "outbox_age: the oldest of {unpublished} unpublished outbox row{} was written {} ago (at most {} allowed): is a relay running, and the broker reachable?",
                plural(*unpublished),
                HumanDuration(*age),
                HumanDuration(*max)
            ),
            Violation::OutboxParked { parked, max } => write!(
                f,
                "outbox_parked: {parked} parked outbox row{} (at most {max} allowed): see `jobs outbox list`, replay with `jobs outbox replay`",
                plural(*parked)
            ),
            Violation::QueuePaused {
                queue,
                paused_for,
                paused_by,
                waiting,
                max,
            } => write!(
                f,
                "queue_paused: queue {queue} has been paused for {} by {paused_by}, with {waiting} job{} waiting (at most {} allowed): resume it with `jobs queue resume {queue}`",
                HumanDuration(*paused_for),
                plural(*waiting),
                HumanDuration(*max)
            ),
            Violation::QueueUnserved {
                queue,
                ready,
                age,
                max,
            } => write!(
                f,
                "queue_unserved: no live worker claims from queue {queue}, where the oldest of {ready} ready job{} has waited {} (at most {} allowed): start a worker that runs this queue",
                plural(*ready),
                HumanDuration(*age),
                HumanDuration(*max)
            ),
            Violation::KindWithoutWorker {
                queue,
                kind,
                ready,
                age,
                max,
            } => write!(
                f,
                "kind_without_worker: no live worker of queue {queue} runs kind {kind}, whose oldest of {ready} ready job{} has waited {} (at most {} allowed): deploy a worker that registers it",
                plural(*ready),
                HumanDuration(*age),
                HumanDuration(*max)
            ),
            Violation::WorkflowStuck {
                job,
                kind,
                queue,
                waiting_for,
                waits_for,
                callback_of,
                max,
            } => {
                write!(
                    f,
                    "workflow_stuck: job {job} (kind {kind}, queue {queue}) has waited {} (at most {} allowed) ",
                    HumanDuration(*waiting_for),
                    HumanDuration(*max)
                )?;
                match (waits_for, callback_of) {
                    (Some(blocking), _) => {
                        write!(
                            f,
                            "for job {} (kind {}), {} after {} attempt{}",
                            blocking.id,
                            blocking.kind,
                            blocking.state,
                            blocking.attempts,
                            plural(u64::try_from(blocking.attempts).unwrap_or(0))
                        )?;
                        match &blocking.last_error {
                            Some(error) => write!(f, ", last error: {}", error.error),
                            None => Ok(()),
                        }
                    }
                    (None, Some(batch)) => write!(f, "for the members of batch {batch}"),
                    (None, None) => write!(f, "for its prerequisites"),
                }
            }
            Violation::BatchOpen {
                batch,
                callback,
                open_for,
                pending,
                max,
            } => {
                write!(
                    f,
                    "batch_open: batch {batch} has been open {} (at most {} allowed) with {pending} member{} pending",
                    HumanDuration(*open_for),
                    HumanDuration(*max),
                    plural(*pending)
                )?;
                match callback {
                    Some(callback) => write!(f, "; its callback, job {callback}, waits"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// What keeps the due jobs of `kind` from every live worker, when they have waited longer than
/// `max`: no live worker claims from the queue (the queue's due jobs, all kinds, as `queues`
/// sums them), or none that does runs the kind.
fn unserved(
    stats: &Stats,
    queues: &[(String, super::Counts)],
    kind: &super::KindStats,
    max: Duration,
) -> Option<Violation> {
    let age = kind.counts.oldest_ready_age.filter(|age| *age > max)?;
    if kind.counts.ready == 0 {
        return None;
    }
    if !stats
        .workers
        .iter()
        .any(|worker| worker.serves_queue(&kind.queue))
    {
        let queue = queues
            .iter()
            .find(|(queue, _)| *queue == kind.queue)
            .map(|(_, counts)| counts);
        return Some(Violation::QueueUnserved {
            queue: kind.queue.clone(),
            ready: queue.map_or(kind.counts.ready, |counts| counts.ready),
            age: queue
                .and_then(|counts| counts.oldest_ready_age)
                .unwrap_or(age),
            max,
        });
    }
    if stats
        .workers
        .iter()
        .any(|worker| worker.serves(&kind.queue, &kind.kind))
    {
        return None;
    }
    Some(Violation::KindWithoutWorker {
        queue: kind.queue.clone(),
        kind: kind.kind.clone(),
        ready: kind.counts.ready,
        age,
        max,
    })
}

fn plural(count: u64) -> &'static str {
    if count == 1 {
        ""
    } else {
        "s"
    }
}

/// Every threshold crossed, by queue and kind in the order of `stats`; empty when healthy.
///
/// A pure function of the numbers, so it can be tested and reused (an HTTP health endpoint, a
/// probe) without a database.
///
/// Whether a live worker can claim a kind's due jobs is judged from [`Stats::workers`]: a
/// [`Stats`] built by hand with no workers reports every queue with due jobs older than
/// [`HealthThresholds::max_unserved_age`] as unserved.
pub fn check(stats: &Stats, thresholds: &HealthThresholds) -> Vec<Violation> {
    let mut violations = Vec::new();
    let queues = stats.queues();
    let mut unserved_reported: Vec<&str> = Vec::new();
    for kind in &stats.kinds {
        let counts = &kind.counts;
        if counts.dead > thresholds.max_dead {
            violations.push(Violation::Dead {
                queue: kind.queue.clone(),
                kind: kind.kind.clone(),
                dead: counts.dead,
                max: thresholds.max_dead,
            });
        }
        let paused = stats.paused.iter().any(|pause| pause.queue == kind.queue);
        let unserved = if paused {
            None
        } else {
            unserved(stats, &queues, kind, thresholds.max_unserved_age)
        };
        let reported_unserved = unserved.is_some();
        match unserved {
            Some(violation @ Violation::QueueUnserved { .. })
                if !unserved_reported.contains(&kind.queue.as_str()) =>
            {
                unserved_reported.push(&kind.queue);
                violations.push(violation);
            }
            Some(violation @ Violation::KindWithoutWorker { .. }) => violations.push(violation),
            _ => {}
        }
        if let Some(age) = counts
            .oldest_ready_age
            .filter(|_| !paused && !reported_unserved)
        {
            if age > thresholds.max_ready_age {
                violations.push(Violation::ReadyTooOld {
                    queue: kind.queue.clone(),
                    kind: kind.kind.clone(),
                    age,
                    ready: counts.ready,
                    max: thresholds.max_ready_age,
                });
            }
        }
        if let Some(longest) = counts.longest_expired_lease {
            if longest > thresholds.max_expired_lease_age {
                violations.push(Violation::LeasesNotRescued {
                    queue: kind.queue.clone(),
                    kind: kind.kind.clone(),
                    expired: counts.expired_leases,
                    longest,
                    max: thresholds.max_expired_lease_age,
                });
            }
        }
    }
    for schedule in &stats.schedules {
        // A schedule this version cannot read (written by a newer one) is not judged.
        let Ok(ticks) = schedule.ticks_since_success(thresholds.schedule_grace) else {
            continue;
        };
        if ticks >= MISSING_AFTER_TICKS {
            violations.push(Violation::ScheduleMissing {
                schedule: schedule.name.clone(),
                kind: schedule.kind.clone(),
                description: schedule.description.clone(),
                ticks,
                last_success: schedule.last_success_ago(),
            });
        }
    }
    let outbox = &stats.outbox;
    if let Some(age) = outbox.oldest_unpublished_age {
        if age > thresholds.max_unpublished_age {
            violations.push(Violation::OutboxBehind {
                unpublished: outbox.unpublished,
                age,
                max: thresholds.max_unpublished_age,
            });
        }
    }
    if outbox.parked > thresholds.max_parked {
        violations.push(Violation::OutboxParked {
            parked: outbox.parked,
            max: thresholds.max_parked,
        });
    }
    for pause in &stats.paused {
        if pause.paused_for > thresholds.max_paused {
            let waiting = stats
                .kinds
                .iter()
                .filter(|kind| kind.queue == pause.queue)
                .map(|kind| kind.counts.ready + kind.counts.scheduled)
                .sum();
            violations.push(Violation::QueuePaused {
                queue: pause.queue.clone(),
                paused_for: pause.paused_for,
                paused_by: pause.paused_by.clone(),
                waiting,
                max: thresholds.max_paused,
            });
        }
    }
    for waiting in &stats.longest_waiting {
        if waiting.waiting_for > thresholds.max_waiting_age {
            violations.push(Violation::WorkflowStuck {
                job: waiting.id,
                kind: waiting.kind.clone(),
                queue: waiting.queue.clone(),
                waiting_for: waiting.waiting_for,
                waits_for: waiting.waits_for.clone(),
                callback_of: waiting.callback_of,
                max: thresholds.max_waiting_age,
            });
        }
    }
    for batch in &stats.longest_open_batches {
        if batch.open_for > thresholds.max_waiting_age {
            violations.push(Violation::BatchOpen {
                batch: batch.id,
                callback: batch.callback,
                open_for: batch.open_for,
                pending: batch.pending,
                max: thresholds.max_waiting_age,
            });
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::{Counts, KindStats, LiveWorker, WorkerQueue};

    /// The counts of kind `send_receipt` in queue `email`, which a live worker serves.
    fn stats(counts: Counts) -> Stats {
        Stats {
            kinds: vec![KindStats {
                queue: "email".into(),
                kind: "send_receipt".into(),
                counts,
            }],
            workers: vec![worker(&["email"], &["send_receipt"])],
            ..Stats::default()
        }
    }

    /// A live worker of `queues` running `kinds`.
    fn worker(queues: &[&str], kinds: &[&str]) -> LiveWorker {
        LiveWorker {
            id: uuid::Uuid::new_v4(),
            host: String::from("box"),
            pid: 42,
            version: String::from("0.1.0"),
            queues: queues
                .iter()
                .map(|queue| WorkerQueue {
                    queue: (*queue).to_owned(),
                    concurrency: 16,
                })
                .collect(),
            kinds: kinds.iter().map(|kind| (*kind).to_owned()).collect(),
            started_at: chrono::Utc::now(),
            last_seen_at: chrono::Utc::now(),
            last_seen_ago: Duration::ZERO,
            limits: Vec::new(),
        }
    }

    fn lines(stats: &Stats, thresholds: &HealthThresholds) -> Vec<String> {
        check(stats, thresholds)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn due_jobs_no_live_worker_can_claim_are_reported_instead_of_as_old() {
        let waiting = Counts {
            ready: 3,
            scheduled: 2,
            oldest_ready_age: Some(Duration::from_secs(400)),
            ..Counts::default()
        };
        let mut unserved = stats(waiting.clone());
        unserved.workers = vec![worker(&["default"], &["send_receipt"])];
        assert_eq!(
            lines(&unserved, &HealthThresholds::default()),
            ["queue_unserved: no live worker claims from queue email, where the oldest of 3 ready jobs has waited 6m40s (at most 1m allowed): start a worker that runs this queue"]
        );
        let mut kind_missing = stats(waiting.clone());
        kind_missing.workers = vec![
            worker(&["email"], &["send_invoice"]),
            worker(&["default"], &["send_receipt"]),
        ];
        assert_eq!(
            lines(&kind_missing, &HealthThresholds::default()),
            ["kind_without_worker: no live worker of queue email runs kind send_receipt, whose oldest of 3 ready jobs has waited 6m40s (at most 1m allowed): deploy a worker that registers it"]
        );
        let patient = HealthThresholds {
            max_unserved_age: Duration::from_secs(600),
            max_ready_age: Duration::from_secs(600),
            ..HealthThresholds::default()
        };
        assert_eq!(lines(&kind_missing, &patient), Vec::<String>::new());
        // Served: only the age threshold applies.
        assert_eq!(
            lines(&stats(waiting), &HealthThresholds::default()),
            ["ready_age: the oldest of 3 ready jobs of kind send_receipt in queue email has waited 6m40s (at most 5m allowed)"]
        );
    }

    #[test]
    fn jobs_not_due_or_in_a_paused_queue_need_no_worker() {
        let mut scheduled_only = stats(Counts {
            scheduled: 5,
            ..Counts::default()
        });
        scheduled_only.workers.clear();
        assert!(check(&scheduled_only, &HealthThresholds::default()).is_empty());
        let mut paused = stats(Counts {
            ready: 5,
            oldest_ready_age: Some(Duration::from_secs(120)),
            ..Counts::default()
        });
        paused.workers.clear();
        paused.paused = vec![crate::admin::QueuePause {
            queue: String::from("email"),
            paused_at: chrono::Utc::now(),
            paused_for: Duration::from_secs(60),
            paused_by: String::from("ops"),
            reason: None,
        }];
        assert!(check(&paused, &HealthThresholds::default()).is_empty());
    }

    #[test]
    fn an_unserved_queue_is_one_line_for_all_its_kinds() {
        let counts = |ready, secs| Counts {
            ready,
            oldest_ready_age: Some(Duration::from_secs(secs)),
            ..Counts::default()
        };
        let stats = Stats {
            kinds: vec![
                KindStats {
                    queue: "media".into(),
                    kind: "resize".into(),
                    counts: counts(2, 90),
                },
                KindStats {
                    queue: "media".into(),
                    kind: "transcode".into(),
                    counts: counts(5, 30),
                },
            ],
            ..Stats::default()
        };
        assert_eq!(
            lines(&stats, &HealthThresholds::default()),
            ["queue_unserved: no live worker claims from queue media, where the oldest of 7 ready jobs has waited 1m30s (at most 1m allowed): start a worker that runs this queue"]
        );
    }

    #[test]
    fn a_quiet_queue_is_healthy() {
        let quiet = stats(Counts {
            ready: 3,
            running: 2,
            done: 1_000_000,
            oldest_ready_age: Some(Duration::from_secs(2)),
            ..Counts::default()
        });
        assert!(check(&quiet, &HealthThresholds::default()).is_empty());
    }

    #[test]
    fn each_threshold_names_the_kind_and_the_number() {
        let sick = stats(Counts {
            ready: 4,
            running: 2,
            expired_leases: 2,
            dead: 3,
            oldest_ready_age: Some(Duration::from_secs(754)),
            longest_expired_lease: Some(Duration::from_secs(180)),
            ..Counts::default()
        });
        let lines: Vec<String> = check(&sick, &HealthThresholds::default())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            lines,
            [
                "dead: 3 dead jobs of kind send_receipt in queue email (at most 0 allowed)",
                "ready_age: the oldest of 4 ready jobs of kind send_receipt in queue email has waited 12m34s (at most 5m allowed)",
                "expired_leases: 2 running jobs of kind send_receipt in queue email with an expired lease, the oldest expired 3m ago and not rescued (at most 1m allowed): is any worker running?",
            ]
        );
    }

    #[test]
    fn a_queue_paused_too_long_is_reported_instead_of_its_waiting_jobs() {
        let mut paused = stats(Counts {
            ready: 4,
            scheduled: 1,
            oldest_ready_age: Some(Duration::from_secs(2 * 60 * 60)),
            ..Counts::default()
        });
        paused.paused = vec![crate::admin::QueuePause {
            queue: String::from("email"),
            paused_at: chrono::Utc::now(),
            paused_for: Duration::from_secs(90 * 60),
            paused_by: String::from("ops@laptop"),
            reason: Some(String::from("provider down")),
        }];
        let lines: Vec<String> = check(&paused, &HealthThresholds::default())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            lines,
            ["queue_paused: queue email has been paused for 1h30m by ops@laptop, with 5 jobs waiting (at most 1h allowed): resume it with `jobs queue resume email`"]
        );
        let patient = HealthThresholds {
            max_paused: Duration::from_secs(2 * 60 * 60),
            ..HealthThresholds::default()
        };
        assert!(check(&paused, &patient).is_empty());
    }

    #[test]
    fn an_outbox_left_behind_and_parked_rows_are_reported() {
        let behind = Stats {
            outbox: crate::admin::OutboxStats {
                unpublished: 12,
                oldest_unpublished_age: Some(Duration::from_secs(421)),
                parked: 1,
            },
            ..Stats::default()
        };
        let lines: Vec<String> = check(&behind, &HealthThresholds::default())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            lines,
            [
                "outbox_age: the oldest of 12 unpublished outbox rows was written 7m1s ago (at most 5m allowed): is a relay running, and the broker reachable?",
                "outbox_parked: 1 parked outbox row (at most 0 allowed): see `jobs outbox list`, replay with `jobs outbox replay`",
            ]
        );
        let tolerant = HealthThresholds {
            max_unpublished_age: Duration::from_secs(600),
            max_parked: 1,
            ..HealthThresholds::default()
        };
        assert!(check(&behind, &tolerant).is_empty());
    }

    #[test]
    fn thresholds_are_exclusive() {
        let at_limit = stats(Counts {
            dead: 2,
            oldest_ready_age: Some(Duration::from_secs(300)),
            ..Counts::default()
        });
        let thresholds = HealthThresholds {
            max_dead: 2,
            ..HealthThresholds::default()
        };
        assert!(check(&at_limit, &thresholds).is_empty());
    }
}
