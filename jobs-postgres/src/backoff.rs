//! Growing delays between attempts to reach the database after an error.

use std::time::Duration;

/// Doubles from 100 ms up to a cap, with jitter; reset after a success.
#[derive(Debug, Clone)]
pub struct ReconnectBackoff {
    next: Duration,
    max: Duration,
}

impl ReconnectBackoff {
    const FIRST: Duration = Duration::from_millis(100);

    /// Starts at 100 ms, never above `max`.
    pub fn new(max: Duration) -> Self {
        Self {
            next: Self::FIRST.min(max),
            max,
        }
    }

    /// The delay before the next attempt (between half and all of the current step).
    pub fn next_delay(&mut self) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(self.max);
        step.mul_f64(0.5 + rand::random::<f64>() / 2.0)
    }

    /// Back to the first step, after a success.
    pub fn reset(&mut self) {
        self.next = Self::FIRST.min(self.max);
    }
}
