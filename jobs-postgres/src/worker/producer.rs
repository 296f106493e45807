//! One queue's claim loop: waits for free slots, claims as many ready jobs as there are free
//! slots in one statement, and hands each to an executor. While claims follow each other back to
//! back it keeps its pool connection ([`HeldConnection`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::task::TaskTracker;

use super::executor::execute;
use super::held_connection::HeldConnection;
use super::watcher::{Idle, QueueWatch};
use super::Shared;
use crate::backoff::ReconnectBackoff;
use crate::store::{self, ClaimLimits, ClaimPlace, ClaimedJob, KeyRound, LimitedClaim};
use jobs_core::RateLimit;

/// What a producer needs to know about the jobs it claims.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuePlan {
    /// What it claims: a queue's name, or a limited kind's.
    pub name: String,
    /// How it claims.
    pub claim: Claim,
    /// Jobs run at once.
    pub concurrency: usize,
    /// The queues whose notifications (work may have arrived) wake it.
    pub woken_by: Vec<String>,
}

/// How a producer claims.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// Jobs of any of `kinds` from queue `queue`.
    Queue {
        /// The queue.
        queue: String,
        /// The kinds it claims: every kind the worker runs without a running limit.
        kinds: Vec<&'static str>,
        /// The lease of each kind, pairing with `kinds`.
        leases: Vec<Duration>,
    },
    /// Jobs of one kind with a fairness key from queue `queue`, round-robin across their keys.
    Fair {
        /// The kind.
        kind: &'static str,
        /// The queue.
        queue: String,
        /// The kind's lease.
        lease: Duration,
    },
    /// Jobs of one kind with a per-key limit from queue `queue`, within its limits,
    /// round-robin across the limit keys with room.
    KeyLimited {
        /// The kind.
        kind: &'static str,
        /// The queue.
        queue: String,
        /// Its limits: per key, and of the kind as a whole.
        limits: ClaimLimits,
        /// The kind's lease.
        lease: Duration,
    },
    /// Jobs of one kind with a limit on its running jobs or on their rate across all workers,
    /// from any of the worker's queues.
    Limited {
        /// The kind.
        kind: &'static str,
        /// The worker's queues.
        queues: Vec<String>,
        /// Most jobs of the kind running at once across all workers, if limited.
        max_running: Option<u32>,
        /// Most jobs of the kind started in any window of the limit's length across all
        /// workers, if limited.
        rate_limit: Option<RateLimit>,
        /// The kind's lease.
        lease: Duration,
    },
}

impl Claim {
    /// Claims up to `wanted` jobs, from the front of the claim order or `from` a place in it
    /// (a limited kind's claims always start at the front); the claims of a fair kind or a kind
    /// with a per-key limit go on after the key `round` ended at, and move it. Claims run on
    /// the connection `held`, taken from the pool when there is none, and dropped on an error
    /// (see [`HeldConnection`]).
    async fn claim(
        &self,
        shared: &Shared,
        wanted: usize,
        from: Option<ClaimPlace>,
        round: &mut KeyRound,
        held: &mut HeldConnection,
    ) -> Result<LimitedClaim, sqlx::Error> {
        let connection = &mut **held.take_or_acquire(&shared.pool).await?;
        let claimed = match self {
            Claim::Fair { kind, queue, lease } => {
                store::claim_fair(connection, queue, kind, *lease, wanted, &mut round.cursor)
                    .await
                    .map(|jobs| LimitedClaim {
                        jobs,
                        rate_room_in: None,
                        held_back: false,
                    })
            }
            Claim::KeyLimited {
                kind,
                queue,
                limits,
                lease,
            } => {
                store::claim_key_limited(connection, kind, queue, wanted, *limits, *lease, round)
                    .await
            }
            Claim::Queue {
                queue,
                kinds,
                leases,
            } => store::claim(connection, queue, kinds, leases, wanted, from)
                .await
                .map(|jobs| LimitedClaim {
                    jobs,
                    rate_room_in: None,
                    held_back: false,
                }),
            Claim::Limited {
                kind,
                queues,
                max_running,
                rate_limit,
                lease,
            } => {
                store::claim_limited(
                    connection,
                    kind,
                    queues,
                    wanted,
                    *max_running,
                    *rate_limit,
                    *lease,
                )
                .await
            }
        };
        claimed.inspect_err(|_| held.drop_connection())
    }
}

/// Longest a producer claims from where its last claim ended before it looks at the front of
/// the claim order again. A claim from that place claims nothing while a job of a higher
/// priority is ready, and the front is looked at in the same round; jobs that go before the
/// place within its priority (committed by a transaction that began before the jobs claimed
/// last, since their `run_at` is that transaction's start, or rescued keeping their `run_at`)
/// wait at most this long while a backlog lasts.
const FRONT_CLAIM_EVERY: Duration = Duration::from_secs(1);

/// Where a producer's claims ended, so that the next claim can start there rather than at the
/// front of the ready index, past the entries of every job claimed since the last vacuum.
struct ClaimPosition {
    /// Whether claims can start from a place (a limited kind's cannot).
    resumable: bool,
    /// The furthest place claimed so far.
    last: Option<ClaimPlace>,
    /// When a claim last started at the front.
    front_claimed_at: Instant,
}

impl ClaimPosition {
    fn new(resumable: bool) -> Self {
        Self {
            resumable,
            last: None,
            front_claimed_at: Instant::now(),
        }
    }

    /// Where the next claim starts: after the last place, unless the front is due a look.
    fn resume_point(&self) -> Option<ClaimPlace> {
        if !self.resumable || self.front_claimed_at.elapsed() >= FRONT_CLAIM_EVERY {
            return None;
        }
        self.last
    }

    /// Notes what a claim took, and whether it started at the front.
    ///
    /// A claim from the front took the first claimable jobs of the order, so every job before
    /// the furthest it took is claimed: the next claim may start there, even when that is
    /// before the last place (a higher priority came in). A claim from the front that took
    /// nothing found nothing claimable at all, and leaves the place as it was.
    fn claimed(&mut self, jobs: &[ClaimedJob], from_front: bool) {
        let furthest = jobs.iter().map(ClaimedJob::place).max();
        if from_front {
            self.front_claimed_at = Instant::now();
            if furthest.is_some() {
                self.last = furthest;
            }
        } else {
            self.last = self.last.max(furthest);
        }
    }
}

/// Claims and starts jobs of one queue until shutdown is requested; executors are spawned on
/// `executors` so the worker can wait for them.
pub async fn produce(
    shared: Arc<Shared>,
    plan: QueuePlan,
    wake: Arc<Notify>,
    watches: Vec<Arc<QueueWatch>>,
    executors: TaskTracker,
) {
    let slots = Arc::new(Semaphore::new(plan.concurrency));
    let mut stop = shared.shutdown_requested.subscribe();
    let mut backoff = ReconnectBackoff::new(shared.config.max_reconnect_delay);
    let all_slots = u32::try_from(plan.concurrency.max(1)).unwrap_or(u32::MAX);
    // Whether the last claim filled every free slot: the queue has more work than slots.
    let mut busy = false;
    let mut position = ClaimPosition::new(matches!(plan.claim, Claim::Queue { .. }));
    let mut held = HeldConnection::default();
    // Where the last claim of a fair kind, or of a kind with a per-key limit, ended: the next
    // round goes on after its key.
    let mut round = KeyRound::new(shared.config.poll_interval);
    let mut outcomes_written = shared.outcomes_written.subscribe();
    // How long a producer held back with room in its rate window waits before claiming again:
    // the room came back between its claim and its look at the window, or other claims hold
    // the jobs locked; one slice of the window (the grain starts are recorded at) at most, the
    // poll interval when shorter.
    let rate_limits = match &plan.claim {
        Claim::Limited { rate_limit, .. } => [*rate_limit, None],
        Claim::KeyLimited { limits, .. } => [limits.rate_limit, limits.rate_limit_per_key],
        Claim::Queue { .. } | Claim::Fair { .. } => [None, None],
    };
    let held_retry = rate_limits
        .into_iter()
        .flatten()
        .map(|limit| limit.per() / 64)
        .fold(shared.config.poll_interval, Duration::min);
    loop {
        let first = tokio::select! {
            // In this order: with no batch window the sleep below is ready at once too.
            biased;
            _ = stop.wait_for(|stop| *stop) => return,
            permit = Arc::clone(&slots).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            // Every slot is taken by jobs still running: the claims' connection goes back to
            // the pool (where those jobs may need it) unless a slot frees within the window.
            () = tokio::time::sleep(shared.config.claim_batch_window), if held.is_held() => {
                held.drop_connection();
                continue;
            }
        };
        let mut permits: Vec<OwnedSemaphorePermit> = vec![first];
        let window = shared.config.claim_batch_window;
        if busy && !window.is_zero() && all_slots > 1 {
            // Under load, wait briefly for every slot so one claim carries as many jobs as it
            // can: short jobs free them all within the window, longer ones give what is free.
            let more = Arc::clone(&slots).acquire_many_owned(all_slots - 1);
            if let Ok(Ok(mut more)) = tokio::time::timeout(window, more).await {
                while more.num_permits() > 0 {
                    match more.split(1) {
                        Some(one) => permits.push(one),
                        None => break,
                    }
                }
            }
        }
        while let Ok(permit) = Arc::clone(&slots).try_acquire_owned() {
            permits.push(permit);
        }
        // A stop at once frees the slots of executors waiting on a full outcome queue before
        // this task hears of the stop: claim nothing once either is under way.
        if *shared.abandoned.borrow() || *stop.borrow() {
            return;
        }
        let wanted = permits.len();
        let mut claimed = 0;
        let mut failure = None;
        let mut rate_room_in = None;
        let mut held_back = false;
        // Outcomes written from here on may free room under a running limit.
        outcomes_written.borrow_and_update();
        // From where the last claim ended, when that is known and the front was looked at
        // recently; then from the front for whatever is still wanted.
        let mut from = position.resume_point();
        loop {
            match plan
                .claim
                .claim(&shared, wanted - claimed, from, &mut round, &mut held)
                .await
            {
                Ok(LimitedClaim {
                    jobs,
                    rate_room_in: room_in,
                    held_back: jobs_held_back,
                }) => {
                    rate_room_in = room_in;
                    held_back = jobs_held_back;
                    claimed += jobs.len();
                    position.claimed(&jobs, from.is_none());
                    for job in jobs {
                        let Some(permit) = permits.pop() else { break };
                        shared
                            .metrics
                            .job_picked_up(&job.kind, &job.queue, job.waited());
                        executors.spawn(execute(Arc::clone(&shared), job, permit));
                    }
                }
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
            if claimed == wanted || from.is_none() {
                break;
            }
            from = None;
        }
        drop(permits);
        if let Some(error) = failure {
            busy = false;
            let delay = backoff.next_delay();
            tracing::warn!(queue = plan.name, %error, ?delay, "claiming failed; retrying");
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
            continue;
        }
        backoff.reset();
        let drained = claimed < wanted;
        busy = !drained;
        if !busy {
            // The claims' connection goes back to the pool until claims follow each other again.
            held.drop_connection();
        }
        if let Some(room_in) = rate_room_in {
            // The kind's rate limit lets nothing more start before then, whatever arrives.
            tokio::select! {
                () = tokio::time::sleep(room_in) => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
        } else if held_back {
            // A limit held due jobs back. Room comes back when a running job of the kind ends:
            // one of this worker's when its outcome is written (its slot is free before that,
            // while the outcome waits for the completer), or another worker's (found at the
            // next poll); or, under a rate limit whose window has room again, at once.
            // Outcomes written since this round's claim began wake it at once. Under a per-key
            // limit, jobs enqueued meanwhile may be ones the limit lets in (another key's): the
            // queues are watched while it waits, as when it runs out of work.
            let _idle = matches!(plan.claim, Claim::KeyLimited { .. }).then(|| Idle::new(&watches));
            tokio::select! {
                _ = outcomes_written.changed() => {}
                () = wake.notified() => {}
                () = tokio::time::sleep(held_retry) => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
        } else if drained {
            // Out of work: the queues are watched while this producer sleeps, so that enqueue
            // announces new work; the watch, once granted, wakes it to claim again.
            let _idle = Idle::new(&watches);
            tokio::select! {
                () = wake.notified() => {}
                () = tokio::time::sleep(shared.config.poll_interval) => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
        }
    }
}
