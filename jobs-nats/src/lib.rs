//! NATS JetStream for the `jobs` outbox: [`NatsPublisher`] hands outbox rows to a JetStream
//! stream, for a [`Relay`](jobs_postgres::outbox::Relay).
//!
//! Each row is published to the subject `<prefix><topic>` with the row's message id (a uuid
//! drawn when the row was written, unique beyond its database) as `Nats-Msg-Id`, and the relay
//! marks it published only once the stream has acknowledged it. A relay that crashes between
//! publishing and marking publishes the row again with the same id: the stream drops the copy if
//! it comes within its duplicate window (`duplicate_window`, 2 minutes by default; keep it
//! longer than a relay takes to come back), and the publisher checks that the message the
//! stream holds under that id is this one; another message under it parks the row as an alarm
//! (see [`NatsPublisher`]). Consumers must still be idempotent: past the window, a copy is
//! stored.
//!
//! ```no_run
//! # async fn run(pool: jobs_postgres::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use jobs_nats::NatsPublisher;
//! use jobs_postgres::outbox::{Relay, RelayConfig};
//!
//! let client = async_nats::connect("nats://127.0.0.1:4222").await?;
//! // A stream must capture the subjects: here `events.>`, for topics like `orders.placed`.
//! let publisher = NatsPublisher::new(async_nats::jetstream::new(client)).subject_prefix("events.");
//! let relay = Relay::new(pool, publisher, RelayConfig::default())?;
//! relay.run_until(jobs_postgres::worker::shutdown_signal()).await;
//! # Ok(())
//! # }
//! ```
//!
//! The stream is the application's to create (subjects, retention, replicas, duplicate window):
//! a subject no stream captures makes each publish fail as retryable, so rows wait, and the
//! health numbers show them waiting, until one does.

#![warn(missing_docs)]

mod publisher;
#[cfg(feature = "testing")]
pub mod testing;

pub use async_nats;
pub use publisher::NatsPublisher;
