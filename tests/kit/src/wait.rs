//! Polling a condition with a deadline: tests wait on what they expect to become true, never
//! for a fixed time.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long [`wait_until`] waits: far above any scheduling delay, so that only a real failure
/// reaches it.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(20);

/// How often a condition is polled.
const POLL_EVERY: Duration = Duration::from_millis(20);

/// Polls `condition` until it holds; panics after [`DEFAULT_WAIT`] naming `what` it waited for.
pub async fn wait_until<F, Fut>(what: &str, condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_until_within(what, DEFAULT_WAIT, condition).await;
}

/// Polls `condition` until it holds; panics after `within` naming `what` it waited for.
pub async fn wait_until_within<F, Fut>(what: &str, within: Duration, condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_until_or(what, within, condition, String::new).await;
}

/// Polls `condition` until it holds; after `within`, panics naming `what` it waited for,
/// followed by what `explain` says (the logs of the processes involved, say).
pub async fn wait_until_or<F, Fut>(
    what: &str,
    within: Duration,
    mut condition: F,
    explain: impl FnOnce() -> String,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if condition().await {
            return;
        }
        if Instant::now() >= deadline {
            panic!(
                "timed out after {within:?} waiting for {what}\n{}",
                explain()
            );
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}
