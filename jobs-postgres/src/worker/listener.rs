//! Wakes queue producers when enqueue announces ready work with NOTIFY, and renews the leases
//! at once when a job this worker runs is asked to stop (the renewal's answer tells the run).

use std::collections::HashMap;
use std::sync::Arc;

use jobs_core::JobId;
use sqlx::postgres::PgListener;
use tokio::sync::{watch, Notify};

use super::{heartbeat, reach, Shared};
use crate::backoff::ReconnectBackoff;
use crate::store::cancel::CANCEL_CHANNEL;
use crate::store::NOTIFY_CHANNEL;

/// Listens for notifications until the worker stops, reconnecting after errors. After any
/// (re)connection every queue is woken and the leases are renewed once, since notifications
/// sent meanwhile are lost.
pub async fn listen(shared: Arc<Shared>, wakers: HashMap<String, Vec<Arc<Notify>>>) {
    let mut stop = shared.shutdown_requested.subscribe();
    let mut backoff = ReconnectBackoff::new(shared.config.max_reconnect_delay);
    let wake_all = || wakers.values().flatten().for_each(|wake| wake.notify_one());
    let database = reach::describe(&shared.pool.connect_options());
    loop {
        let connected = async {
            // Straight to the database first: through the pool, a refused connection would wait
            // out the pool's acquire timeout and be reported as `PoolTimedOut`.
            reach::check_connection(&shared.pool).await?;
            let mut listener = PgListener::connect_with(&shared.pool).await?;
            // A lost connection ends `try_recv` at once: reconnecting is this loop's job, which
            // checks the database directly first (sqlx's own reconnection would go through the
            // pool, and report a refused connection as `PoolTimedOut` after its timeout).
            listener.eager_reconnect(false);
            listener
                .listen_all([NOTIFY_CHANNEL, CANCEL_CHANNEL])
                .await?;
            Ok::<_, sqlx::Error>(listener)
        };
        let connected = tokio::select! {
            connected = connected => connected,
            _ = stop.wait_for(|stop| *stop) => return,
        };
        let mut listener = match connected {
            Ok(listener) => listener,
            Err(error) => {
                let delay = backoff.next_delay();
                let error = tokio::select! {
                    error = reach::explain(&shared.pool, error) => error,
                    _ = stop.wait_for(|stop| *stop) => return,
                };
                tracing::warn!(
                    %error,
                    %database,
                    ?delay,
                    "LISTEN failed; polling meanwhile, retrying"
                );
                tokio::select! {
                    () = tokio::time::sleep(delay) => continue,
                    _ = stop.wait_for(|stop| *stop) => return,
                }
            }
        };
        backoff.reset();
        wake_all();
        // Requests to stop a running job sent while not listening were missed too (before the
        // first LISTEN, a job may already run): one renewal at once, whose answer tells the runs.
        if !renew_leases_unless_stopped(&shared, &mut stop).await {
            return;
        }
        loop {
            let received = tokio::select! {
                received = listener.try_recv() => received,
                _ = stop.wait_for(|stop| *stop) => return,
            };
            match received {
                Ok(Some(notification)) if notification.channel() == CANCEL_CHANNEL => {
                    let runs_it = notification.payload().parse::<JobId>().is_ok_and(|id| {
                        shared.running.held().iter().any(|(held, _, _)| *held == id)
                    });
                    if runs_it && !renew_leases_unless_stopped(&shared, &mut stop).await {
                        return;
                    }
                }
                Ok(Some(notification)) => {
                    for wake in wakers.get(notification.payload()).into_iter().flatten() {
                        wake.notify_one();
                    }
                }
                Ok(None) => {
                    tracing::warn!(%database, "LISTEN connection lost; reconnecting");
                    break;
                }
                Err(error) => {
                    tracing::warn!(%error, %database, "LISTEN failed; reconnecting");
                    break;
                }
            }
        }
    }
}

/// Renews the leases of the jobs this worker runs at once (the answer tells the runs asked to
/// stop); `false` when the worker stopped first.
async fn renew_leases_unless_stopped(shared: &Shared, stop: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        () = heartbeat::beat_once(shared) => true,
        _ = stop.wait_for(|stop| *stop) => false,
    }
}
