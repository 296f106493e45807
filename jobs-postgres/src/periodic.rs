//! The one shape of every periodic service (heartbeat, rescuer, retention, gauges, outbox relay):
//! a pass, a pause whose length the pass decides, again, until asked to stop.
//!
//! The services differ in one thing, made explicit by [`OnStop`]: whether a stop interrupts the
//! pass in flight (a renewal, a rescue or a count not done is done by the next one, here or in
//! another process) or waits for it to end (a relay batch publishes, then records what it
//! published: interrupting it would publish rows again).

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

/// What a stop does to the pass in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnStop {
    /// Drop the pass where it stands, even in the middle of a statement: its transaction rolls
    /// back, and the next pass (here or in another process) does its work.
    AbandonPass,
    /// Let the pass end, then stop: for passes whose work must be recorded once done.
    FinishPass,
}

/// A service run by [`run_periodically`].
pub(crate) trait PeriodicService {
    /// One pass; returns how long to pause before the next.
    async fn run_pass(&mut self) -> Duration;
}

/// Runs `service` until `stop` resolves: waits `first_pass_after`, then runs a pass and pauses
/// for as long as it says, again and again. A stop during a pause ends at once; during a pass,
/// as `on_stop` says.
pub(crate) async fn run_periodically(
    mut service: impl PeriodicService,
    first_pass_after: Duration,
    on_stop: OnStop,
    stop: impl Future<Output = ()>,
) {
    let mut stop = pin!(stop);
    let mut pause = first_pass_after;
    loop {
        if !pause.is_zero() {
            tokio::select! {
                biased;
                () = &mut stop => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
        pause = match on_stop {
            OnStop::AbandonPass => tokio::select! {
                biased;
                () = &mut stop => return,
                pause = service.run_pass() => pause,
            },
            OnStop::FinishPass => {
                let pause = service.run_pass().await;
                if is_ready(&mut stop) {
                    return;
                }
                pause
            }
        };
    }
}

/// Whether `stop` has resolved, without waiting for it.
fn is_ready(stop: &mut std::pin::Pin<&mut impl Future<Output = ()>>) -> bool {
    let waker = std::task::Waker::noop();
    let mut context = std::task::Context::from_waker(waker);
    stop.as_mut().poll(&mut context).is_ready()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use tokio::sync::{watch, Notify};

    use super::*;

    /// Counts its passes; each pass waits for `release` when given one.
    struct Counting {
        passes: Arc<AtomicUsize>,
        started: Arc<Notify>,
        release: Option<Arc<Notify>>,
        pause: Duration,
    }

    impl PeriodicService for Counting {
        async fn run_pass(&mut self) -> Duration {
            self.started.notify_one();
            if let Some(release) = &self.release {
                release.notified().await;
            }
            self.passes.fetch_add(1, Ordering::SeqCst);
            self.pause
        }
    }

    async fn stopped_by(mut stop: watch::Receiver<bool>) {
        let _ = stop.wait_for(|stopped| *stopped).await;
    }

    #[tokio::test]
    async fn a_stop_abandons_the_pass_in_flight_when_asked_to() {
        let (stop, stopped) = watch::channel(false);
        let passes = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(Notify::new());
        let service = Counting {
            passes: Arc::clone(&passes),
            started: Arc::clone(&started),
            release: Some(Arc::new(Notify::new())),
            pause: Duration::ZERO,
        };
        let run = tokio::spawn(run_periodically(
            service,
            Duration::ZERO,
            OnStop::AbandonPass,
            stopped_by(stopped),
        ));
        started.notified().await;
        stop.send_replace(true);
        run.await.unwrap();
        assert_eq!(passes.load(Ordering::SeqCst), 0, "the pass was dropped");
    }

    #[tokio::test]
    async fn a_stop_waits_for_the_pass_in_flight_when_asked_to() {
        let (stop, stopped) = watch::channel(false);
        let passes = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(Notify::new());
        let release = Arc::new(Notify::new());
        let service = Counting {
            passes: Arc::clone(&passes),
            started: Arc::clone(&started),
            release: Some(Arc::clone(&release)),
            pause: Duration::ZERO,
        };
        let run = tokio::spawn(run_periodically(
            service,
            Duration::ZERO,
            OnStop::FinishPass,
            stopped_by(stopped),
        ));
        started.notified().await;
        stop.send_replace(true);
        release.notify_one();
        run.await.unwrap();
        assert_eq!(
            passes.load(Ordering::SeqCst),
            1,
            "the pass ended, then the loop"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn passes_follow_the_pause_each_returns_after_the_first_delay() {
        let (stop, stopped) = watch::channel(false);
        let passes = Arc::new(AtomicUsize::new(0));
        let service = Counting {
            passes: Arc::clone(&passes),
            started: Arc::new(Notify::new()),
            release: None,
            pause: Duration::from_secs(10),
        };
        let run = tokio::spawn(run_periodically(
            service,
            Duration::from_secs(5),
            OnStop::AbandonPass,
            stopped_by(stopped),
        ));
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(
            passes.load(Ordering::SeqCst),
            0,
            "not before the first delay"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(passes.load(Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(passes.load(Ordering::SeqCst), 2);
        stop.send_replace(true);
        run.await.unwrap();
    }
}
