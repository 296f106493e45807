//! The graceful shutdown of a worker, once requested: stop claiming, let running jobs finish
//! within the grace period, interrupt the rest and hand them back, write the last outcomes,
//! then stop the periodic services.

use std::pin::pin;

use super::tasks::Tasks;
use super::{reach, Shared};

impl Tasks {
    /// Shuts the worker down gracefully (see the [module](self) docs).
    ///
    /// The grace period counts from the call: a producer still waiting for its claim (for a
    /// connection, during an outage) uses it up too, and is stopped when it ends; at once when
    /// no job runs and the database cannot be reached at all.
    pub(super) async fn shut_down(self, shared: &Shared) {
        let Tasks {
            services,
            executors,
            completer,
            drain,
            maintenance,
        } = self;
        tracing::info!(
            running = shared.running.len(),
            "shutdown requested; no new jobs will be claimed"
        );
        shared.shutdown_requested.send_replace(true);
        let deadline = tokio::time::Instant::now() + shared.config.shutdown_grace;
        let service_tasks: Vec<_> = services.iter().map(|task| task.abort_handle()).collect();
        let mut settled = pin!(async {
            for service in services {
                let _ = service.await;
            }
            executors.close();
            executors.wait().await;
        });
        let in_time = tokio::select! {
            ended = tokio::time::timeout_at(deadline, &mut settled) => ended.is_ok(),
            () = reach::outage_with_nothing_running(&shared.pool, &executors) => {
                // Nothing to settle, and the services can only be waiting for a database that
                // cannot answer (a claim that went through before the outage began comes back
                // when its lease expires, as after the grace period).
                tracing::warn!(
                    "the database cannot be reached and no job runs: stopping without waiting for it"
                );
                for task in &service_tasks {
                    task.abort();
                }
                // A job claimed at the last moment still gets what is left of the grace period.
                tokio::time::timeout_at(deadline, &mut settled).await.is_ok()
            }
        };
        if !in_time {
            tracing::warn!(
                running = shared.running.len(),
                "grace period over; interrupting running jobs and handing them back"
            );
            shared.interrupt.send_replace(true);
            // A producer still waiting for its claim would hold the shutdown for as long as the
            // pool's acquire timeout. Should its claim have gone through, the jobs it took come
            // back when their leases expire.
            for task in &service_tasks {
                task.abort();
            }
            settled.await;
        }
        drain.send_replace(true);
        if let Some(completer) = completer {
            let _ = completer.await;
        }
        shared.stopped.send_replace(true);
        for task in maintenance {
            let _ = task.await;
        }
    }
}
