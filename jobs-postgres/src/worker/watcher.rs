//! Watching queues for work, so that enqueue announces ready work only while a producer waits
//! for it (see [`crate::store::watch`] for why no wake-up is lost).
//!
//! A producer that runs out of work, or that a limit holds back, marks its queues idle while it
//! sleeps ([`Idle`]). Each queue's watcher ([`keep_watch`]) holds the queue's watch lock, on a
//! session of its own, while any producer of the queue is idle: once the lock is granted, which
//! comes after every enqueue that found the queue unwatched has ended, it wakes the queue's
//! producers, which claim again; from
//! then on enqueue announces its jobs with `NOTIFY`. When no producer has been idle for
//! [`LET_GO_AFTER`], the watcher lets the lock go, and enqueue stops announcing: a worker busy with work claims again as soon as it has free slots, without
//! being told. Each queue's watcher keeps one session open for this, outside the pool.

use std::sync::Arc;
use std::time::Duration;

use sqlx::{Connection, PgConnection};
use tokio::sync::{watch, Notify};

use super::Shared;
use crate::backoff::ReconnectBackoff;
use crate::store::watch as store;

/// How long no producer of a queue must have been idle before its watcher lets the lock go. A
/// queue whose producers run out of work now and then keeps its watch; and a grant wakes the
/// producers to claim, so were claims slower than this, an empty queue would be claimed about
/// once per claim and grant (a database that slow is polled about once a second).
const LET_GO_AFTER: Duration = Duration::from_secs(1);

/// How often a watcher holding the lock checks that its session still answers. A session lost
/// loses its lock, and enqueue stops announcing: the producers poll meanwhile, and the watcher
/// takes the lock again on a new session.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// One queue's watch: how many of its producers are idle, and how to wake them all.
#[derive(Debug)]
pub struct QueueWatch {
    /// The queue.
    queue: String,
    /// Its producers waiting for work now.
    idle: watch::Sender<usize>,
    /// Every producer of the queue, woken when the watch is granted.
    producers: Vec<Arc<Notify>>,
}

impl QueueWatch {
    /// The watch of `queue`, whose producers are woken through `producers`.
    pub fn new(queue: String, producers: Vec<Arc<Notify>>) -> Self {
        Self {
            queue,
            idle: watch::Sender::new(0),
            producers,
        }
    }

    fn wake_producers(&self) {
        for producer in &self.producers {
            producer.notify_one();
        }
    }
}

/// A producer out of work, for as long as it is held: its queues are watched meanwhile.
pub struct Idle<'a> {
    watches: &'a [Arc<QueueWatch>],
}

impl<'a> Idle<'a> {
    /// Marks a producer of the queues of `watches` idle until the value is dropped.
    pub fn new(watches: &'a [Arc<QueueWatch>]) -> Self {
        for watch in watches {
            watch.idle.send_modify(|idle| *idle += 1);
        }
        Self { watches }
    }
}

impl Drop for Idle<'_> {
    fn drop(&mut self) {
        for watch in self.watches {
            watch
                .idle
                .send_modify(|idle| *idle = idle.saturating_sub(1));
        }
    }
}

/// Holds `queue`'s watch lock while any of its producers is idle, until the worker stops, on a
/// session opened once and kept (opened again only after it failed).
pub async fn keep_watch(shared: Arc<Shared>, queue: Arc<QueueWatch>) {
    let mut stop = shared.shutdown_requested.subscribe();
    let mut idle = queue.idle.subscribe();
    let mut backoff = ReconnectBackoff::new(shared.config.max_reconnect_delay);
    let mut session: Option<PgConnection> = None;
    loop {
        tokio::select! {
            waited = idle.wait_for(|idle| *idle > 0) => if waited.is_err() { return },
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let held = tokio::select! {
            held = hold_while_idle(&shared, &queue, &mut idle, &mut session) => held,
            _ = stop.wait_for(|stop| *stop) => return,
        };
        if let Err(error) = held {
            // The lock went with the session: claim again, and poll until it is held again.
            session = None;
            queue.wake_producers();
            let delay = backoff.next_delay();
            tracing::warn!(
                queue = queue.queue,
                %error,
                ?delay,
                "watching the queue failed; polling meanwhile, retrying"
            );
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
        } else {
            backoff.reset();
        }
    }
}

/// Takes the queue's watch lock on `session` (opening it first when there is none), wakes the
/// queue's producers once it is granted, and holds it until no producer has been idle for
/// [`LET_GO_AFTER`], checking every [`CHECK_EVERY`] that the session still answers; then lets
/// it go. Dropped while waiting (the worker stops), the session closes with it and PostgreSQL
/// drops the request or the lock.
async fn hold_while_idle(
    shared: &Shared,
    queue: &QueueWatch,
    idle: &mut watch::Receiver<usize>,
    session: &mut Option<PgConnection>,
) -> Result<(), sqlx::Error> {
    let session = match session {
        Some(session) => session,
        None => {
            let mut opened = PgConnection::connect_with(&shared.pool.connect_options()).await?;
            store::set_up_session(&mut opened).await?;
            session.insert(opened)
        }
    };
    store::watch_queue(session, &queue.queue).await?;
    queue.wake_producers();
    let let_go = async {
        loop {
            if idle.wait_for(|idle| *idle == 0).await.is_err() {
                return;
            }
            // A producer idle again before then keeps the watch.
            tokio::select! {
                () = tokio::time::sleep(LET_GO_AFTER) => return,
                changed = idle.changed() => if changed.is_err() { return },
            }
        }
    };
    tokio::pin!(let_go);
    let mut checks =
        tokio::time::interval_at(tokio::time::Instant::now() + CHECK_EVERY, CHECK_EVERY);
    checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = &mut let_go => break,
            _ = checks.tick() => store::still_holding(session).await?,
        }
    }
    store::unwatch_queue(session, &queue.queue).await
}
