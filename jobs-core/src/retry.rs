//! Retry policy: how many attempts a job gets and how long it waits between them.
//!
//! Backoff is a pure function of the attempt number and a jitter sample, so the schedule can be
//! shown, tested and reasoned about without a clock.

use std::time::Duration;

/// How a job kind retries after a transient failure.
///
/// The delay after failed attempt `n` (1-based) is
/// `min(backoff_base × 2^(n-1), backoff_max) × f`, with `f` drawn uniformly from
/// `[1 - jitter, 1]`. With the defaults (30 s base, 1 h cap, jitter 0.5, 8 attempts):
///
/// | failed attempt | delay before jitter | with the smallest jitter |
/// |---|---|---|
/// | 1 | 30 s | 15 s |
/// | 2 | 1 min | 30 s |
/// | 3 | 2 min | 1 min |
/// | 4 | 4 min | 2 min |
/// | 5 | 8 min | 4 min |
/// | 6 | 16 min | 8 min |
/// | 7 | 32 min | 16 min |
///
/// so the 8th and last attempt comes at least about 32 minutes after the first failure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included. At least 1.
    pub max_attempts: u32,
    /// Delay after the first failed attempt, before jitter.
    pub backoff_base: Duration,
    /// Upper bound of any delay, before jitter.
    pub backoff_max: Duration,
    /// Fraction of the delay that jitter may remove, in `[0, 1]`.
    pub jitter: f64,
}

impl RetryPolicy {
    /// Default attempts in all: the last one comes past a typical 20-minute provider outage.
    pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;
    /// Default delay after the first failure.
    pub const DEFAULT_BACKOFF_BASE: Duration = Duration::from_secs(30);
    /// Default cap on any delay.
    pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(3600);
    /// Default jitter: delays are multiplied by a factor drawn from `[0.5, 1.0]`.
    pub const DEFAULT_JITTER: f64 = 0.5;

    /// Most attempts a job may have: the database stores the count as a 4-byte integer.
    pub const MAX_ATTEMPTS_LIMIT: u32 = i32::MAX as u32;

    /// The default policy, usable in constants.
    pub const DEFAULT: RetryPolicy = RetryPolicy {
        max_attempts: Self::DEFAULT_MAX_ATTEMPTS,
        backoff_base: Self::DEFAULT_BACKOFF_BASE,
        backoff_max: Self::DEFAULT_BACKOFF_MAX,
        jitter: Self::DEFAULT_JITTER,
    };

    /// The delay after failed attempt `attempt` (1-based), given a jitter sample in `[0, 1)`.
    ///
    /// A sample of 0 gives the longest delay, a sample near 1 the shortest.
    ///
    /// ```
    /// use std::time::Duration;
    /// use jobs_core::RetryPolicy;
    /// let policy = RetryPolicy::default();
    /// assert_eq!(policy.backoff(1, 0.0), Duration::from_secs(30));
    /// assert_eq!(policy.backoff(3, 0.0), Duration::from_secs(120));
    /// assert_eq!(policy.backoff(3, 0.5), Duration::from_secs(90));
    /// assert_eq!(policy.backoff(20, 0.0), Duration::from_secs(3600));
    /// ```
    pub fn backoff(&self, attempt: u32, jitter_sample: f64) -> Duration {
        let exponent = attempt.saturating_sub(1).min(63);
        let uncapped = self
            .backoff_base
            .checked_mul(1u32.checked_shl(exponent).unwrap_or(u32::MAX))
            .unwrap_or(Duration::MAX);
        let capped = uncapped.min(self.backoff_max);
        let sample = jitter_sample.clamp(0.0, 1.0);
        capped.mul_f64(1.0 - self.jitter.clamp(0.0, 1.0) * sample)
    }

    /// The window `[shortest, longest]` of the delay after failed attempt `attempt`.
    pub fn backoff_window(&self, attempt: u32) -> (Duration, Duration) {
        (self.backoff(attempt, 1.0), self.backoff(attempt, 0.0))
    }

    /// Checks that `max_attempts` is from 1 to [`MAX_ATTEMPTS_LIMIT`](Self::MAX_ATTEMPTS_LIMIT):
    /// a larger count would not fit the database's integer, and is refused rather than
    /// silently lowered.
    pub fn check_max_attempts(max_attempts: u32) -> Result<(), MaxAttemptsError> {
        if (1..=Self::MAX_ATTEMPTS_LIMIT).contains(&max_attempts) {
            Ok(())
        } else {
            Err(MaxAttemptsError(max_attempts))
        }
    }

    /// Whether a job that has used `attempts` attempts may run again.
    pub fn has_attempts_left(&self, attempts: u32) -> bool {
        attempts < self.max_attempts
    }
}

/// A `max_attempts` out of range: below 1, or beyond what the database stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("`max_attempts` is {0}: it must be from 1 to {limit}", limit = RetryPolicy::MAX_ATTEMPTS_LIMIT)]
pub struct MaxAttemptsError(pub u32);

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let policy = RetryPolicy::default();
        let longest: Vec<u64> = (1..=8).map(|n| policy.backoff(n, 0.0).as_secs()).collect();
        assert_eq!(longest, vec![30, 60, 120, 240, 480, 960, 1920, 3600]);
    }

    #[test]
    fn jitter_stays_in_its_window() {
        let policy = RetryPolicy::default();
        let (shortest, longest) = policy.backoff_window(2);
        assert_eq!(shortest, Duration::from_secs(30));
        assert_eq!(longest, Duration::from_secs(60));
        for sample in [0.0, 0.25, 0.5, 0.99] {
            let delay = policy.backoff(2, sample);
            assert!(delay >= shortest && delay <= longest);
        }
    }

    #[test]
    fn no_jitter_gives_exact_delays() {
        let policy = RetryPolicy {
            jitter: 0.0,
            ..RetryPolicy::default()
        };
        assert_eq!(policy.backoff(2, 0.9), Duration::from_secs(60));
    }

    #[test]
    fn max_attempts_must_fit_the_database() {
        RetryPolicy::check_max_attempts(1).unwrap();
        RetryPolicy::check_max_attempts(2_147_483_647).unwrap();
        assert_eq!(
            RetryPolicy::check_max_attempts(3_000_000_000),
            Err(MaxAttemptsError(3_000_000_000))
        );
        assert_eq!(RetryPolicy::check_max_attempts(0), Err(MaxAttemptsError(0)));
    }

    #[test]
    fn huge_attempt_numbers_do_not_overflow() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.backoff(u32::MAX, 0.0), Duration::from_secs(3600));
    }

    #[test]
    fn smallest_jitter_still_outlasts_a_twenty_minute_outage() {
        let policy = RetryPolicy::default();
        let total: Duration = (1..policy.max_attempts)
            .map(|n| policy.backoff(n, 1.0))
            .sum();
        assert!(total > Duration::from_secs(20 * 60), "{total:?}");
    }
}
