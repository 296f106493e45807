//! The transactional outbox: events for other systems, written in the application's
//! transaction and published to a broker by a relay.
//!
//! Writing to a broker from a request is a dual write: the order is saved and the event never
//! sent, or the event sent and the order rolled back. Instead, [`publish_in`] writes the event
//! as a row of `jobs_outbox` in the caller's transaction, so it exists exactly when the
//! business data does; a [`Relay`] publishes it later through a [`Publisher`] (NATS JetStream:
//! the `jobs-nats` crate) and marks it published.
//!
//! - [`publish_in`] / [`publish_event_in`]: write an event (ids, not snapshots); its topic must
//!   pass [`validate_topic`].
//! - [`Publisher`]: the seam to a broker, one method; [`PublishError`] says retryable or
//!   permanent.
//! - [`Relay`]: claims, publishes and marks rows a batch at a time; standalone
//!   ([`Relay::run_until`]) or in a worker ([`WorkerBuilder::relay`]). Its order promise,
//!   failure handling and crash behaviour are on its docs.
//! - Operating: [`admin::stats`] counts unpublished and parked rows and the age of the oldest
//!   unpublished one; [`admin::check`] alerts on them; [`admin::outbox`] lists and replays
//!   parked rows; retention deletes published rows.
//!
//! Delivery is at least once. A relay that crashes between publishing and marking publishes its
//! batch again, with the same message ids, which a broker with deduplication (JetStream's
//! `Nats-Msg-Id`) drops within its window; past the window, or with another broker, consumers
//! see the copy: they must be idempotent.
//!
//! [`WorkerBuilder::relay`]: crate::WorkerBuilder::relay
//! [`admin::stats`]: crate::admin::stats
//! [`admin::check`]: crate::admin::check
//! [`admin::outbox`]: crate::admin::outbox

mod broker;
mod config;
mod relay;
mod topic;
mod write;

pub use broker::{OutboxMessage, PublishError, Publisher, Retry};
pub use config::RelayConfig;
/// The retry policy of [`RelayConfig::retry`], shared with jobs.
pub use jobs_core::RetryPolicy;
pub(crate) use relay::RelayTask;
pub use relay::{Relay, RelayError, RelayReport};
pub use topic::{validate_topic, TopicError, MAX_TOPIC_BYTES};
pub use write::{publish_event_in, publish_in, Event, OutboxError, OutboxId};
