//! Worker settings, their defaults and their validation.

use std::time::Duration;

use crate::admin::RetentionConfig;
use crate::config_error::ConfigError;

/// How a worker claims, leases, polls, rescues and shuts down. Every field has a documented
/// default; [`WorkerConfig::validate`] runs when the worker is built.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerConfig {
    /// How long a claim holds a job before another worker may rescue it. Default 30 s.
    pub lease: Duration,
    /// How often the leases of running jobs are renewed. Default 10 s; must be shorter than the
    /// lease.
    pub heartbeat_interval: Duration,
    /// How often an idle queue is polled when no notification arrives. Default 1 s.
    pub poll_interval: Duration,
    /// How often expired leases are rescued. Default 5 s.
    pub rescue_interval: Duration,
    /// Most jobs one rescue statement returns. Default 100.
    pub rescue_batch: usize,
    /// Jobs run at once per queue, unless the queue sets its own. Default 16.
    pub default_concurrency: usize,
    /// How long running jobs may take to finish after shutdown is requested, before they are
    /// interrupted and handed back. Default 30 s.
    pub shutdown_grace: Duration,
    /// Whether to wake on LISTEN/NOTIFY (polling stays as a fallback). Default true.
    pub listen: bool,
    /// Longest wait between attempts to reach the database after an error. Default 5 s.
    pub max_reconnect_delay: Duration,
    /// When the queue is busy (the last claim filled every free slot), how long the producer
    /// waits for all its slots to be free before claiming what is free, so that one statement
    /// claims more jobs. Idle queues never wait: pickup latency is unaffected. Zero disables it.
    /// Default 2 ms.
    pub claim_batch_window: Duration,
    /// Most jobs a claim takes beyond the free slots, under a backlog of short jobs (the last
    /// claim filled every free slot, and every slot freed within `claim_batch_window`), as many
    /// as the slots started in 25 ms at the pace of the last claim's jobs, up to this: they
    /// wait in the worker, `running` under its lease, and start as slots free, so that one claim
    /// serves several rounds of slots; once fewer wait than a claim takes ahead, the next claim
    /// goes out, for jobs ahead alone, while they start, so up to twice this many wait at once.
    /// They start after the jobs claimed before them, even when a job of a higher priority
    /// arrives meanwhile, and no other worker can take them; a job
    /// that waits 100 ms is handed back, keeping its place. A crash leaves them to the rescue,
    /// like the jobs that were running, so a job on its last attempt is never claimed ahead.
    /// A fair kind's claims take them turn by turn between its keys, as they take the others,
    /// and so do the claims of a kind whose only limit is a per-key running limit (the jobs
    /// claimed ahead count against it); kinds with a rate limit or a kind-wide running limit
    /// never claim ahead. Zero turns it off, as does a
    /// `claim_batch_window` of zero. Default 512: a claim takes ahead as many jobs as the slots
    /// start within 25 ms at their pace, so the cap binds only above about 20,000 jobs a second,
    /// where the jobs waiting must outlast the next claim's round trip under load (128 did not:
    /// measured at 40,000 jobs a second, the slots emptied during nearly every claim ahead).
    pub claim_ahead: usize,
    /// How outcomes are written. Default: batched, up to 500 per statement.
    pub completion: Completion,
    /// Deleting done and cancelled jobs past an age, one process at a time: see
    /// [`RetentionConfig`] (default: kept 7 days, deleted 1,000 per statement, looked for every
    /// minute). `None` turns it off in this worker. Dead jobs are never deleted automatically.
    pub retention: Option<RetentionConfig>,
    /// How often this worker publishes the health numbers ([`admin::stats`]) as gauges (see
    /// [`crate::metrics`]). Every worker publishes the same table-wide numbers, counted by one
    /// process per interval ([`Gauges::refresh_shared`]): the others read the figures it
    /// stored. `None` turns it off in this worker. Without a
    /// metrics recorder installed the statement still runs: turn it off if you export no
    /// metrics. Default 15 s.
    ///
    /// [`admin::stats`]: crate::admin::stats
    /// [`Gauges::refresh_shared`]: crate::metrics::Gauges::refresh_shared
    pub gauges_interval: Option<Duration>,
    /// How often this worker refreshes its row of live workers (`jobs workers`,
    /// [`admin::live_workers`]) and writes the throughput it counted. A worker not refreshed for
    /// [`PRESENCE_MISSED`] intervals counts as gone. Default 5 s.
    ///
    /// [`admin::live_workers`]: crate::admin::live_workers
    pub presence_interval: Duration,
    /// Whether this worker counts the runs that end, per minute, queue and kind, for
    /// [`admin::throughput`] (`jobs throughput`): counted in memory, added to the database with
    /// each presence refresh, one row per minute, queue, kind and worker. Default true.
    ///
    /// [`admin::throughput`]: crate::admin::throughput
    pub throughput: bool,
}

/// How many presence intervals ([`WorkerConfig::presence_interval`]) a worker may miss before it
/// counts as gone.
pub const PRESENCE_MISSED: u32 = 3;

/// How a worker writes the outcomes of runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// Outcomes go to one completer that writes all that have accumulated in one statement
    /// (group commit): no added wait when idle, few statements under load. A crash can lose
    /// the outcomes handed over but not yet written, up to one batch plus those queued: those
    /// jobs run again once their lease expires. The queue holds at most `max_batch` outcomes;
    /// when it is full (the database slow or unreachable), a finished run waits for room with
    /// its slot held, so the worker claims no more until outcomes are written again.
    Batched {
        /// Most outcomes written by one statement.
        max_batch: usize,
    },
    /// Each executor writes its own outcome before freeing its slot: one statement per job; a
    /// crash loses only the outcomes of runs in progress.
    PerJob,
}

impl Default for Completion {
    fn default() -> Self {
        Completion::Batched { max_batch: 500 }
    }
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(10),
            poll_interval: Duration::from_secs(1),
            rescue_interval: Duration::from_secs(5),
            rescue_batch: 100,
            default_concurrency: 16,
            shutdown_grace: Duration::from_secs(30),
            listen: true,
            max_reconnect_delay: Duration::from_secs(5),
            claim_batch_window: Duration::from_millis(2),
            claim_ahead: 512,
            completion: Completion::default(),
            retention: Some(RetentionConfig::default()),
            gauges_interval: Some(Duration::from_secs(15)),
            presence_interval: Duration::from_secs(5),
            throughput: true,
        }
    }
}

impl WorkerConfig {
    /// Checks that the settings can work together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |setting, reason| Err(ConfigError { setting, reason });
        if self.lease < Duration::from_millis(100) {
            return fail("lease", "must be at least 100 ms");
        }
        if self.heartbeat_interval.is_zero() || self.heartbeat_interval >= self.lease {
            return fail(
                "heartbeat_interval",
                "must be longer than zero and shorter than the lease, or leases expire while jobs run",
            );
        }
        if self.poll_interval.is_zero() {
            return fail("poll_interval", "must be longer than zero");
        }
        if self.rescue_interval.is_zero() {
            return fail("rescue_interval", "must be longer than zero");
        }
        if self.rescue_batch == 0 {
            return fail("rescue_batch", "must be at least 1");
        }
        if self.default_concurrency == 0 {
            return fail("default_concurrency", "must be at least 1");
        }
        if self.completion == (Completion::Batched { max_batch: 0 }) {
            return fail("completion", "a batch must hold at least 1 outcome");
        }
        if self.max_reconnect_delay.is_zero() {
            return fail("max_reconnect_delay", "must be longer than zero");
        }
        if self
            .gauges_interval
            .is_some_and(|interval| interval.is_zero())
        {
            return fail(
                "gauges_interval",
                "must be longer than zero, or None to turn it off",
            );
        }
        if self.presence_interval < Duration::from_millis(100) {
            return fail("presence_interval", "must be at least 100 ms");
        }
        if let Some(retention) = &self.retention {
            retention.validate()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        WorkerConfig::default().validate().unwrap();
    }

    #[test]
    fn heartbeat_must_be_shorter_than_the_lease() {
        let config = WorkerConfig {
            heartbeat_interval: Duration::from_secs(30),
            ..WorkerConfig::default()
        };
        assert_eq!(config.validate().unwrap_err().setting, "heartbeat_interval");
    }
}
