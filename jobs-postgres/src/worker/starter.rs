//! Starting the jobs a producer claimed: at once on a free slot, or once one frees, in the order
//! they were claimed (see [`ReadAhead`]).

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::OwnedSemaphorePermit;
use tokio_util::task::TaskTracker;

use super::executor::execute;
use super::read_ahead::{ClaimedRun, ReadAhead};
use super::Shared;
use crate::store::ClaimedJob;

/// Starts a producer's jobs on its executors, and remembers the key of the last job taken in a
/// turn that started (see [`KeyRound::handed_back`](crate::store::KeyRound::handed_back)).
pub struct Starter {
    shared: Arc<Shared>,
    executors: TaskTracker,
    last_turn: Option<String>,
    started: u64,
}

impl Starter {
    /// Starts jobs on `executors`, which the worker waits for.
    pub fn new(shared: Arc<Shared>, executors: TaskTracker) -> Self {
        Self {
            shared,
            executors,
            last_turn: None,
            started: 0,
        }
    }

    /// How many jobs it has started.
    pub fn started(&self) -> u64 {
        self.started
    }

    /// The key of the last job started that a claim took in a turn between keys; `None` when
    /// none has started.
    pub fn last_turn(&self) -> Option<String> {
        self.last_turn.clone()
    }

    /// Takes in the `jobs` of a claim sent at `sent_at` that returned at `claimed_at`, in claim
    /// order: each is this worker's from the claim on (the heartbeat renews its lease, counted
    /// from when the claim was sent, whether it runs now or waits for a slot); the first start
    /// on `permits`, one each, and the rest wait in `read_ahead`.
    pub fn take_in(
        &mut self,
        jobs: Vec<ClaimedJob>,
        sent_at: Instant,
        claimed_at: Instant,
        permits: &mut Vec<OwnedSemaphorePermit>,
        read_ahead: &mut ReadAhead,
    ) {
        for job in jobs {
            let lease_lost = self.shared.running.insert(
                job.id,
                job.lease_token,
                self.shared.lease_of(&job.kind),
                sent_at,
            );
            let run = ClaimedRun {
                job,
                lease_lost,
                claimed_at,
            };
            match permits.pop() {
                Some(permit) => self.start(run, permit),
                None => read_ahead.push(run),
            }
        }
    }

    /// Starts on `permit` the job that has waited longest in `read_ahead`, passing over those
    /// whose lease was lost; gives `permit` back when none waits.
    pub fn start_waiting(
        &mut self,
        read_ahead: &mut ReadAhead,
        permit: OwnedSemaphorePermit,
    ) -> Option<OwnedSemaphorePermit> {
        while let Some(run) = read_ahead.pop() {
            if self
                .shared
                .running
                .may_hold(run.job.id, run.job.lease_token)
            {
                self.start(run, permit);
                return None;
            }
            // The heartbeat found its lease lost, or could not renew it in time: another worker
            // or a rescue may have the job.
            self.shared.running.remove(run.job.id, run.job.lease_token);
        }
        Some(permit)
    }

    /// Starts the run of a claimed job on the slot `permit` holds.
    fn start(&mut self, run: ClaimedRun, permit: OwnedSemaphorePermit) {
        let ClaimedRun {
            mut job,
            lease_lost,
            claimed_at,
        } = run;
        self.started += 1;
        // The run does not need the key: it is kept here, not copied.
        if let Some(key) = job.turn_key.take() {
            self.last_turn = Some(key);
        }
        // Picked up when it starts: a job claimed ahead waited for its slot too.
        self.shared.metrics.job_picked_up(
            &job.kind,
            &job.queue,
            job.waited() + claimed_at.elapsed(),
        );
        self.executors
            .spawn(execute(Arc::clone(&self.shared), job, lease_lost, permit));
    }
}
