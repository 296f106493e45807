//! The relay: claims pending outbox rows, publishes them and records the outcomes, a batch per
//! transaction. See [`Relay`].

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio::sync::watch;

use super::{OutboxMessage, PublishError, Publisher, RelayConfig, Retry};
use crate::backoff::ReconnectBackoff;
use crate::config_error::ConfigError;
use crate::metrics;
use crate::periodic::{run_periodically, OnStop, PeriodicService};
use crate::store::outbox::{self as store, OutboxOutcomes as Outcomes};
use crate::store::transactions;
use crate::worker::storable_text;

/// Why a batch could not be relayed. Nothing is lost: the rows of a batch that failed stay
/// pending (those already published are published again, and the broker drops the copies).
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The database could not be reached or refused a statement.
    #[error("relaying outbox rows failed: {0}")]
    Database(#[from] sqlx::Error),
}

/// What one [`Relay::run_once`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayReport {
    /// Rows claimed.
    pub claimed: usize,
    /// Rows published and marked so.
    pub published: usize,
    /// Rows whose publish failed and that will be tried again after their backoff.
    pub retrying: usize,
    /// Rows parked: their publish failed permanently, or failed on their last attempt.
    pub parked: usize,
    /// Rows claimed but not attempted, left pending as they were: an earlier row of their topic
    /// was outside the batch (held by another relay, or backing off), or a retryable failure
    /// ended the batch.
    pub held_back: usize,
    /// The whole batch was claimed and dealt with: more rows may be waiting, run again at once.
    pub more: bool,
}

/// Publishes outbox rows to a broker through a [`Publisher`], in batches.
///
/// One batch is one transaction: claim up to `batch_size` due pending rows by id (`FOR UPDATE
/// SKIP LOCKED`, so relays in other processes take other rows), publish them one at a time,
/// each awaited until the broker acknowledges it, record every outcome in one statement, and
/// commit. Any number of relays may run at once, in any processes: a row is never published by
/// two at the same time.
///
/// **Order.** Within a topic, a row is handed to the broker only once every earlier row of the
/// topic that had committed when its batch was claimed is published (or parked): rows of a
/// topic reach the broker in the order of their ids, which is the order of their writes for
/// transactions that commit one after the other. Rows of concurrent transactions have no order
/// between them. Different topics have no order between them and are relayed in parallel by
/// several relays.
///
/// **Failures.** A retryable failure ends the batch: the row backs off (with jitter, see
/// [`RelayConfig::retry`]) with its attempts and last error recorded, and the later rows of its
/// topic wait for it. A row out of attempts, or failing permanently, is parked: kept, counted in
/// the health numbers, and replayed by an operator; the later rows of its topic go on.
///
/// **Crashes.** A relay that dies between publishing and committing leaves its batch pending:
/// the next batch publishes those rows again with the same message ids (each row's uuid,
/// unique beyond this database), which the broker drops within its deduplication window.
/// Delivery is at least once: consumers must still be idempotent.
///
/// **Duplicate ids.** A publisher that finds the broker holding a *different* message under a
/// row's message id returns [`PublishError::duplicate_id`]: the row is parked with that error,
/// logged at error level and counted in
/// [`OUTBOX_DUPLICATE_IDS_TOTAL`](crate::metrics::OUTBOX_DUPLICATE_IDS_TOTAL), rather than marked
/// published while the broker dropped it. It draws a new message id as it is parked, so that an
/// operator's replay is published rather than dropped again.
pub struct Relay<P> {
    pool: PgPool,
    publisher: P,
    config: RelayConfig,
}

impl<P: Publisher> Relay<P> {
    /// A relay of the outbox in `pool`'s database to `publisher`; refuses settings that cannot
    /// work. It needs one connection while a batch is in flight.
    pub fn new(pool: PgPool, publisher: P, config: RelayConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            pool,
            publisher,
            config,
        })
    }

    /// Its settings.
    pub fn config(&self) -> &RelayConfig {
        &self.config
    }

    /// Its publisher.
    pub fn publisher(&self) -> &P {
        &self.publisher
    }

    /// Relays one batch (see the [type](Relay) docs) and reports what it did.
    pub async fn run_once(&self) -> Result<RelayReport, RelayError> {
        let batch_size = self.config.batch_size;
        let mut transaction = transactions::begin_on(&self.pool).await?;
        let rows = store::claim_outbox(&mut transaction, batch_size).await?;
        let mut report = RelayReport {
            claimed: rows.len(),
            ..RelayReport::default()
        };
        let mut outcomes = Outcomes::default();
        let mut blocked_topics: HashSet<String> = HashSet::new();
        let mut ended = false;
        for row in rows {
            if ended || row.held_back || blocked_topics.contains(&row.topic) {
                report.held_back += 1;
                continue;
            }
            let attempt = u32::try_from(row.attempts).unwrap_or(0).saturating_add(1);
            let message = OutboxMessage {
                id: row.id,
                message_id: row.message_id,
                topic: row.topic,
                payload: row.payload,
                attempt,
                created_at: instant(row.created_epoch),
            };
            match self.publisher.publish(&message).await {
                Ok(()) => {
                    outcomes.push(message.id, "published", Duration::ZERO, None);
                    report.published += 1;
                }
                Err(error) => {
                    self.failed(&message, &error, &mut outcomes, &mut report);
                    if error.retry() == Retry::Retryable {
                        // The broker may be down: the rest of the batch waits for the next one
                        // rather than for a timeout each.
                        ended = true;
                    }
                    blocked_topics.insert(message.topic);
                }
            }
        }
        store::record_outbox_outcomes(&mut transaction, &outcomes).await?;
        transaction.commit().await?;
        report.more =
            report.claimed == batch_size && report.published + report.parked == batch_size;
        Ok(report)
    }

    /// Records a failed publish: backing off, or parked.
    fn failed(
        &self,
        message: &OutboxMessage,
        error: &PublishError,
        outcomes: &mut Outcomes,
        report: &mut RelayReport,
    ) {
        let retry = &self.config.retry;
        // Publishers' texts come from elsewhere: a NUL would make the batch's outcomes unwritable.
        let text = Some(storable_text(error.message().to_owned()));
        if error.is_duplicate_id() {
            metrics::outbox_duplicate_id();
            tracing::error!(
                outbox.id = message.id,
                outbox.message_id = %message.message_id,
                outbox.topic = %message.topic,
                attempt = message.attempt,
                %error,
                "outbox row parked: the broker holds another message under its message id, so it \
                 dropped this one; something else publishes under the outbox's ids (the row draws \
                 a new id for its replay)"
            );
            outcomes.park_under_new_id(message.id, text);
            report.parked += 1;
        } else if error.retry() == Retry::Permanent || !retry.has_attempts_left(message.attempt) {
            tracing::error!(
                outbox.id = message.id,
                outbox.topic = %message.topic,
                attempt = message.attempt,
                %error,
                "outbox row parked: it will not be published until an operator replays it"
            );
            outcomes.push(message.id, "parked", Duration::ZERO, text);
            report.parked += 1;
        } else {
            let delay = retry.backoff(message.attempt, rand::random::<f64>());
            tracing::warn!(
                outbox.id = message.id,
                outbox.topic = %message.topic,
                attempt = message.attempt,
                retry_in = ?delay,
                %error,
                "publishing an outbox row failed; it and the later rows of its topic wait"
            );
            outcomes.push(message.id, "pending", delay, text);
            report.retrying += 1;
        }
    }

    /// Relays batch after batch until `shutdown` resolves: at once after a full batch, after
    /// [`RelayConfig::poll_interval`] otherwise, after a growing delay while the database cannot
    /// be reached. The batch in flight when `shutdown` resolves is finished first.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) {
        let backoff = ReconnectBackoff::new(self.config.max_reconnect_delay);
        let relaying = Relaying {
            relay: self,
            backoff,
        };
        run_periodically(relaying, Duration::ZERO, OnStop::FinishPass, shutdown).await;
    }

    /// The relay as a task a worker runs until its stop signal turns true.
    pub(crate) fn into_task(self) -> RelayTask {
        Box::new(move |mut stop: watch::Receiver<bool>| {
            Box::pin(self.run_until(async move {
                // An error means the worker is gone: stop too.
                let _ = stop.wait_for(|stopped| *stopped).await;
            }))
        })
    }
}

/// A relay attached to a worker: started with the signal that stops it.
pub(crate) type RelayTask =
    Box<dyn FnOnce(watch::Receiver<bool>) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// A point in time from seconds since the Unix epoch.
fn instant(epoch: f64) -> DateTime<Utc> {
    // Microseconds, as PostgreSQL keeps them.
    #[allow(clippy::cast_possible_truncation)]
    let micros = (epoch * 1_000_000.0).round() as i64;
    DateTime::from_timestamp_micros(micros).unwrap_or_default()
}

/// A relay running batch after batch, with the backoff of its failures to reach the database.
struct Relaying<P> {
    relay: Relay<P>,
    backoff: ReconnectBackoff,
}

impl<P: Publisher> PeriodicService for Relaying<P> {
    async fn run_pass(&mut self) -> Duration {
        match self.relay.run_once().await {
            Ok(report) => {
                self.backoff.reset();
                if report.more {
                    Duration::ZERO
                } else {
                    self.relay.config.poll_interval
                }
            }
            Err(error) => {
                let delay = self.backoff.next_delay();
                tracing::warn!(%error, retry_in = ?delay, "outbox relay: will retry");
                delay
            }
        }
    }
}
