//! The relay's settings, their defaults and their validation.

use std::time::Duration;

use jobs_core::RetryPolicy;

use crate::config_error::ConfigError;

/// How a [`Relay`](super::Relay) claims, polls and retries. Every field has a documented
/// default; [`RelayConfig::validate`] runs when the relay is built.
#[derive(Debug, Clone, PartialEq)]
pub struct RelayConfig {
    /// Most rows one batch claims, publishes and marks in one transaction. Default 100.
    pub batch_size: usize,
    /// How long the relay waits before looking again when a batch found less than a full batch
    /// to publish (a full one is followed at once by the next). Default 200 ms: the most an
    /// event waits for an idle relay.
    pub poll_interval: Duration,
    /// Attempts and backoff of a row whose publish failed with a retryable error; after
    /// `max_attempts` attempts the row is parked. Default [`RelayConfig::DEFAULT_RETRY`].
    pub retry: RetryPolicy,
    /// Longest wait between attempts to reach the database after an error. Default 5 s.
    pub max_reconnect_delay: Duration,
}

impl RelayConfig {
    /// The default retry policy of rows: 100 attempts, from 1 s doubling to at most 1 min,
    /// jitter 0.5:
    ///
    /// | failed attempt | delay before jitter |
    /// |---|---|
    /// | 1, 2, 3 | 1 s, 2 s, 4 s |
    /// | 4, 5, 6 | 8 s, 16 s, 32 s |
    /// | 7 to 99 | 1 min |
    ///
    /// so a row is parked after failing for at least about 47 minutes (about 95 without jitter):
    /// a broker outage shorter than that parks nothing, and a broker back after a short outage
    /// is noticed within a minute.
    pub const DEFAULT_RETRY: RetryPolicy = RetryPolicy {
        max_attempts: 100,
        backoff_base: Duration::from_secs(1),
        backoff_max: Duration::from_secs(60),
        jitter: 0.5,
    };
}

impl Default for RelayConfig {
    fn default() -> Self {
        Self {
            batch_size: 100,
            poll_interval: Duration::from_millis(200),
            retry: Self::DEFAULT_RETRY,
            max_reconnect_delay: Duration::from_secs(5),
        }
    }
}

impl RelayConfig {
    /// Checks that the settings can work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |setting, reason| Err(ConfigError { setting, reason });
        if self.batch_size == 0 {
            return fail("relay.batch_size", "must be at least 1");
        }
        if self.poll_interval.is_zero() {
            return fail("relay.poll_interval", "must be longer than zero");
        }
        if self.retry.max_attempts == 0 {
            return fail("relay.retry.max_attempts", "must be at least 1");
        }
        if self.retry.backoff_max < self.retry.backoff_base {
            return fail(
                "relay.retry.backoff_max",
                "must not be shorter than backoff_base",
            );
        }
        if !(0.0..=1.0).contains(&self.retry.jitter) {
            return fail("relay.retry.jitter", "must be between 0 and 1");
        }
        if self.max_reconnect_delay.is_zero() {
            return fail("relay.max_reconnect_delay", "must be longer than zero");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        RelayConfig::default().validate().unwrap();
    }

    #[test]
    fn the_default_retry_parks_after_about_three_quarters_of_an_hour_at_the_earliest() {
        let retry = RelayConfig::DEFAULT_RETRY;
        let shortest: Duration = (1..retry.max_attempts)
            .map(|attempt| retry.backoff(attempt, 1.0))
            .sum();
        assert!(
            (Duration::from_secs(45 * 60)..Duration::from_secs(50 * 60)).contains(&shortest),
            "{shortest:?}"
        );
    }

    #[test]
    fn an_empty_batch_cannot_work() {
        let config = RelayConfig {
            batch_size: 0,
            ..RelayConfig::default()
        };
        assert_eq!(config.validate().unwrap_err().setting, "relay.batch_size");
    }
}
