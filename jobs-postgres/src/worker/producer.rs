//! One queue's claim loop: waits for free slots, claims as many ready jobs as there are free
//! slots in one statement, and hands each to an executor.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::task::TaskTracker;

use super::backoff::ReconnectBackoff;
use super::executor::execute;
use super::Shared;
use crate::store::{self, ClaimedJob};

/// What a producer needs to know about the jobs it claims.
pub struct QueuePlan {
    /// What it claims: a queue's name, or a limited kind's.
    pub name: String,
    /// How it claims.
    pub claim: Claim,
    /// Jobs run at once.
    pub concurrency: usize,
    /// Woken when work may have arrived.
    pub wake: Arc<Notify>,
}

/// How a producer claims.
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
    /// Jobs of one kind with a limit on its running jobs across all workers, from any of the
    /// worker's queues.
    Limited {
        /// The kind.
        kind: &'static str,
        /// The worker's queues.
        queues: Vec<String>,
        /// Most jobs of the kind running at once across all workers.
        max_running: u32,
        /// The kind's lease.
        lease: Duration,
    },
}

impl Claim {
    async fn claim(&self, shared: &Shared, wanted: usize) -> Result<Vec<ClaimedJob>, sqlx::Error> {
        match self {
            Claim::Queue {
                queue,
                kinds,
                leases,
            } => store::claim(&shared.pool, queue, kinds, leases, wanted).await,
            Claim::Limited {
                kind,
                queues,
                max_running,
                lease,
            } => {
                store::claim_limited(&shared.pool, kind, queues, wanted, *max_running, *lease).await
            }
        }
    }
}

/// Claims and starts jobs of one queue until shutdown is requested; executors are spawned on
/// `executors` so the worker can wait for them.
pub async fn produce(shared: Arc<Shared>, plan: QueuePlan, executors: TaskTracker) {
    let slots = Arc::new(Semaphore::new(plan.concurrency));
    let mut stop = shared.shutdown_requested.subscribe();
    let mut backoff = ReconnectBackoff::new(shared.config.max_reconnect_delay);
    let half = u32::try_from((plan.concurrency / 2).max(1)).unwrap_or(u32::MAX);
    // Whether the last claim filled every free slot: the queue has more work than slots.
    let mut busy = false;
    loop {
        let first = tokio::select! {
            permit = Arc::clone(&slots).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            _ = stop.wait_for(|stop| *stop) => return,
        };
        let mut permits: Vec<OwnedSemaphorePermit> = vec![first];
        let window = shared.config.claim_batch_window;
        if busy && !window.is_zero() && half > 1 {
            // Under load, wait briefly for half the slots so one claim carries more jobs.
            let more = Arc::clone(&slots).acquire_many_owned(half - 1);
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
        let wanted = permits.len();
        let claimed = plan.claim.claim(&shared, wanted).await;
        match claimed {
            Ok(jobs) => {
                backoff.reset();
                let drained = jobs.len() < wanted;
                busy = !drained;
                {
                    let executors = &executors;
                    for job in jobs {
                        let Some(permit) = permits.pop() else { break };
                        shared
                            .metrics
                            .job_picked_up(&job.kind, &job.queue, job.waited());
                        executors.spawn(execute(Arc::clone(&shared), job, permit));
                    }
                }
                drop(permits);
                if drained {
                    tokio::select! {
                        () = plan.wake.notified() => {}
                        () = tokio::time::sleep(shared.config.poll_interval) => {}
                        _ = stop.wait_for(|stop| *stop) => return,
                    }
                }
            }
            Err(error) => {
                busy = false;
                drop(permits);
                let delay = backoff.next_delay();
                tracing::warn!(queue = plan.name, %error, ?delay, "claiming failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = stop.wait_for(|stop| *stop) => return,
                }
            }
        }
    }
}
