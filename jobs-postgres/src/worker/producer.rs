//! One queue's claim loop: waits for free slots, claims as many ready jobs as there are free
//! slots in one statement, and hands each to an executor.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::task::TaskTracker;

use super::backoff::ReconnectBackoff;
use super::executor::execute;
use super::Shared;
use crate::store;

/// What a producer needs to know about its queue.
pub struct QueuePlan {
    /// The queue's name.
    pub name: String,
    /// Registered kinds routed to it.
    pub kinds: Vec<&'static str>,
    /// The lease of each kind, pairing with `kinds`.
    pub leases: Vec<Duration>,
    /// Jobs run at once.
    pub concurrency: usize,
    /// Woken when work may have arrived.
    pub wake: Arc<Notify>,
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
        let claimed =
            store::claim(&shared.pool, &plan.name, &plan.kinds, &plan.leases, wanted).await;
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
