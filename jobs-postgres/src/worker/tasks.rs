//! Starting what a worker's plan says: the producers (each woken by the notifications of its
//! queues), the queues' watchers, the scheduler, the outbox relays, the listener, the
//! completer, and the periodic services (heartbeat, rescuer, presence, retention, gauges).

use std::collections::HashMap;
use std::sync::Arc;

use jobs_core::Schedule;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::{AbortHandle, JoinHandle};
use tokio_util::task::TaskTracker;

use super::producer::QueuePlan;
use super::watcher::{self, QueueWatch};
use super::{
    completer, gauge_publisher, heartbeat, listener, presence, producer, rescuer, retention,
    scheduler, Shared,
};
use crate::outbox::RelayTask;
use crate::store::workers::Presence;
use crate::store::Outcome;

/// The tasks of a running worker.
pub(super) struct Tasks {
    /// Tasks that claim or enqueue (producers, watchers, scheduler, relays, listener): they end
    /// by themselves once shutdown is requested.
    pub(super) services: Vec<JoinHandle<()>>,
    /// The runs in progress.
    pub(super) executors: TaskTracker,
    /// Writes batched outcomes until told that every executor is done (`drain`).
    pub(super) completer: Option<JoinHandle<()>>,
    /// Tells the completer to write what is left and end.
    pub(super) drain: watch::Sender<bool>,
    /// Periodic services that run until the worker has stopped: heartbeat, rescuer, presence,
    /// retention, gauges.
    pub(super) maintenance: Vec<JoinHandle<()>>,
}

impl Tasks {
    /// Starts the tasks for `plans`, `schedules` and `relays`, with the completer when outcomes
    /// are batched (`outcomes`: its queue and largest batch); the worker says `presence` of
    /// itself in the live workers.
    pub(super) fn spawn(
        shared: &Arc<Shared>,
        plans: Vec<QueuePlan>,
        schedules: Vec<Schedule>,
        relays: Vec<RelayTask>,
        outcomes: Option<(mpsc::Receiver<Outcome>, usize)>,
        presence: Presence,
    ) -> Self {
        let (drain, drained) = watch::channel(false);
        let completer = outcomes.map(|(outcomes, max_batch)| {
            tokio::spawn(completer::complete(
                Arc::clone(shared),
                outcomes,
                drained,
                max_batch,
            ))
        });
        let executors = TaskTracker::new();
        let mut wakers: HashMap<String, Vec<Arc<Notify>>> = HashMap::new();
        let plans: Vec<(QueuePlan, Arc<Notify>)> = plans
            .into_iter()
            .map(|plan| {
                let wake = Arc::new(Notify::new());
                for queue in &plan.woken_by {
                    wakers
                        .entry(queue.clone())
                        .or_default()
                        .push(Arc::clone(&wake));
                }
                (plan, wake)
            })
            .collect();
        // Without notifications the producers poll: nothing to watch for.
        let watches: HashMap<String, Arc<QueueWatch>> = if shared.config.listen {
            wakers
                .iter()
                .map(|(queue, producers)| {
                    let watch = QueueWatch::new(queue.clone(), producers.clone());
                    (queue.clone(), Arc::new(watch))
                })
                .collect()
        } else {
            HashMap::new()
        };
        let mut services = Vec::new();
        for watch in watches.values() {
            services.push(tokio::spawn(watcher::keep_watch(
                Arc::clone(shared),
                Arc::clone(watch),
            )));
        }
        for (plan, wake) in plans {
            let watching = plan
                .woken_by
                .iter()
                .filter_map(|queue| watches.get(queue).cloned())
                .collect();
            services.push(tokio::spawn(producer::produce(
                Arc::clone(shared),
                plan,
                wake,
                watching,
                executors.clone(),
            )));
        }
        if !schedules.is_empty() {
            services.push(tokio::spawn(scheduler::schedule(
                Arc::clone(shared),
                schedules,
            )));
        }
        for relay in relays {
            services.push(tokio::spawn(relay(shared.shutdown_requested.subscribe())));
        }
        if shared.config.listen {
            services.push(tokio::spawn(listener::listen(Arc::clone(shared), wakers)));
        }
        let mut maintenance = vec![
            tokio::spawn(heartbeat::heartbeat(Arc::clone(shared))),
            tokio::spawn(rescuer::rescuer(Arc::clone(shared))),
            tokio::spawn(presence::keep_present(Arc::clone(shared), presence)),
        ];
        if let Some(config) = shared.config.retention.clone() {
            maintenance.push(tokio::spawn(retention::run_retention(
                shared.pool.clone(),
                config,
                shared.stop_signal(),
            )));
        }
        if let Some(interval) = shared.config.gauges_interval {
            maintenance.push(tokio::spawn(gauge_publisher::publish_gauges(
                shared.pool.clone(),
                interval,
                shared.stop_signal(),
            )));
        }
        Self {
            services,
            executors,
            completer,
            drain,
            maintenance,
        }
    }

    /// Every task to abort on a stop at once (executors stop by themselves).
    pub(super) fn abort_handles(&self) -> Vec<AbortHandle> {
        self.services
            .iter()
            .chain(&self.maintenance)
            .chain(&self.completer)
            .map(JoinHandle::abort_handle)
            .collect()
    }
}
