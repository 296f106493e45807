//! The worker's presence: its row of live workers (`jobs_workers`), written when it starts,
//! refreshed every [`WorkerConfig::presence_interval`] whether or not it runs anything, and
//! deleted when it stops gracefully; and, with each refresh, the throughput it counted since the
//! last one (runs ended per queue and kind), added to its own rows of `jobs_throughput`.
//!
//! A worker not refreshed for [`PRESENCE_MISSED`] intervals counts as gone (killed, crashed, cut
//! off): readers skip its row, and the next refresh of any worker deletes it. A stop at once
//! writes nothing more: the row ages out the same way, and the throughput not yet written is
//! lost (statistics, not the record of any job).
//!
//! [`WorkerConfig::presence_interval`]: super::WorkerConfig::presence_interval

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::config::PRESENCE_MISSED;
use super::plan::KindToRun;
use super::Shared;
use crate::periodic::{run_periodically, OnStop, PeriodicService};
use crate::store::throughput::{self, Tally};
use crate::store::workers::{self, DeclaredLimits, Presence, QueueSlots};

/// Longest the last writes of a stopping worker (its throughput, forgetting its row) may take:
/// a database that does not answer by then does not hold the shutdown.
const LAST_WRITES_WAIT: Duration = Duration::from_secs(2);

/// What worker `id` says of itself: this host and process, this crate's version, its queues
/// with their concurrency, its kinds and the limits it enforces.
pub(crate) fn presence_of<'a>(
    id: Uuid,
    queues: impl IntoIterator<Item = (&'a String, &'a usize)>,
    kinds: &[KindToRun],
) -> Presence {
    Presence {
        id,
        host: host_name(),
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION"),
        queues: queues
            .into_iter()
            .map(|(queue, concurrency)| QueueSlots {
                queue: queue.clone(),
                concurrency: u64::try_from(*concurrency).unwrap_or(u64::MAX),
            })
            .collect(),
        kinds: kinds.iter().map(|kind| kind.name.to_owned()).collect(),
        limits: kinds
            .iter()
            .filter(|kind| {
                kind.max_running.is_some()
                    || kind.rate_limit.is_some()
                    || kind.max_running_per_key.is_some()
                    || kind.rate_limit_per_key.is_some()
            })
            .map(|kind| DeclaredLimits {
                kind: kind.name.to_owned(),
                max_running: kind.max_running,
                rate_jobs: kind.rate_limit.map(|limit| limit.jobs()),
                rate_window_secs: kind.rate_limit.map(|limit| limit.per().as_secs_f64()),
                max_running_per_key: kind.max_running_per_key,
                rate_per_key_jobs: kind.rate_limit_per_key.map(|limit| limit.jobs()),
                rate_per_key_window_secs: kind
                    .rate_limit_per_key
                    .map(|limit| limit.per().as_secs_f64()),
            })
            .collect(),
    }
}

/// This machine's name: the kernel's (Linux), else `HOSTNAME` or `COMPUTERNAME`, else
/// `unknown`.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|host| host.trim().to_owned())
        .filter(|host| !host.is_empty())
        .unwrap_or_else(|| String::from("unknown"))
}

/// Records `presence` now and every presence interval until the worker stops, writing the
/// throughput counted meanwhile; then, on a graceful stop, writes the last throughput and
/// deletes the row.
pub(crate) async fn keep_present(shared: Arc<Shared>, presence: Presence) {
    let every = shared.config.presence_interval;
    let id = presence.id;
    let service = PresenceService {
        shared: Arc::clone(&shared),
        presence,
        started_at: None,
        every,
    };
    run_periodically(
        service,
        Duration::ZERO,
        OnStop::AbandonPass,
        shared.stop_signal(),
    )
    .await;
    if *shared.abandoned.borrow() {
        return;
    }
    let last_writes = async {
        write_throughput(&shared, id).await;
        if let Err(error) = workers::forget_worker(&shared.pool, id).await {
            tracing::warn!(%error, "could not delete this worker's row of live workers; it ages out");
        }
    };
    if tokio::time::timeout(LAST_WRITES_WAIT, last_writes)
        .await
        .is_err()
    {
        tracing::warn!(
            "the database did not take this worker's last throughput and presence in time; its row ages out"
        );
    }
}

/// The presence of one worker.
struct PresenceService {
    shared: Arc<Shared>,
    presence: Presence,
    /// Its start, as its first record returned it.
    started_at: Option<DateTime<Utc>>,
    every: Duration,
}

impl PeriodicService for PresenceService {
    async fn run_pass(&mut self) -> Duration {
        let gone_after = self.every * PRESENCE_MISSED;
        match workers::record_presence(
            &self.shared.pool,
            &self.presence,
            self.started_at,
            gone_after,
        )
        .await
        {
            Ok(started_at) => self.started_at = Some(started_at),
            Err(error) => {
                tracing::warn!(%error, "recording this worker as live failed; will retry")
            }
        }
        write_throughput(&self.shared, self.presence.id).await;
        self.every
    }
}

/// Adds the runs ended since the last call to worker `id`'s throughput rows; what cannot be
/// written (an error, or the write dropped by a stop) is kept for the next call.
pub(crate) async fn write_throughput(shared: &Shared, id: Uuid) {
    let taken = Taken {
        shared,
        tallies: shared.metrics.take_throughput(),
        written: false,
    };
    if taken.tallies.is_empty() {
        return;
    }
    let mut taken = taken;
    match throughput::add_throughput(&shared.pool, id, &taken.tallies).await {
        Ok(()) => taken.written = true,
        Err(error) => tracing::warn!(%error, "writing the throughput failed; will retry"),
    }
}

/// Counts taken to be written: given back unless written, also when the write is dropped.
struct Taken<'a> {
    shared: &'a Shared,
    tallies: Vec<Tally>,
    written: bool,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if !self.written {
            self.shared.metrics.give_back(&self.tallies);
        }
    }
}
