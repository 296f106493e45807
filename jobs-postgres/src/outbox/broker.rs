//! The seam to a broker: [`Publisher`], what it is handed ([`OutboxMessage`]) and how it fails
//! ([`PublishError`]).

use std::fmt;
use std::future::Future;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::OutboxId;

/// One outbox row, as handed to a [`Publisher`].
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxMessage {
    /// The row's id: rows of a topic are handed over in the order of their ids.
    pub id: OutboxId,
    /// The id a broker deduplicates on (JetStream's `Nats-Msg-Id`): a random uuid drawn when the
    /// row was written, the same on every attempt and after a replay. Unlike the row's id it is
    /// not reused by another database, after a failover to a standby that had not yet received
    /// the row, after a point-in-time restore or an identity reset, so that a broker never takes
    /// a new event for a copy of an old one.
    ///
    /// ```
    /// # use jobs_postgres::outbox::OutboxMessage;
    /// let message = OutboxMessage {
    ///     id: 42,
    ///     message_id: uuid::Uuid::from_u128(0x6f1c_40a5_3bd2_4e7c_9a1e_55c0_7b0e_d3f1),
    ///     topic: "orders.placed".into(),
    ///     payload: r#"{"order_id":1042}"#.into(),
    ///     attempt: 1,
    ///     created_at: chrono::DateTime::UNIX_EPOCH,
    /// };
    /// assert_eq!(message.message_id.to_string(), "6f1c40a5-3bd2-4e7c-9a1e-55c07b0ed3f1");
    /// ```
    pub message_id: Uuid,
    /// The topic it was written with, valid (see [`validate_topic`](super::validate_topic)).
    pub topic: String,
    /// The payload, as JSON text.
    pub payload: String,
    /// Which attempt this is, starting at 1. Above 1, an earlier attempt failed. An attempt
    /// whose batch did not commit (the relay crashed between publishing and marking) is not
    /// counted: the row may be at attempt 1 and already in the broker.
    pub attempt: u32,
    /// When the row was written (its transaction's start).
    pub created_at: DateTime<Utc>,
}

/// Whether a failed publish is worth trying again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Trying again may work: the broker is unreachable or timed out, or refused for a reason
    /// that can pass. The row backs off and keeps its place: later rows of its topic wait.
    Retryable,
    /// Trying again cannot work (say, the message is larger than the broker accepts): the row is
    /// parked at once, for an operator, and later rows of its topic go on.
    Permanent,
}

/// Why a message was not published: whether to retry, and a message for the row's
/// `last_error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishError {
    retry: Retry,
    message: String,
    duplicate_id: bool,
}

impl PublishError {
    /// A failure worth retrying.
    pub fn retryable(message: impl fmt::Display) -> Self {
        Self {
            retry: Retry::Retryable,
            message: message.to_string(),
            duplicate_id: false,
        }
    }

    /// A failure no retry can fix.
    pub fn permanent(message: impl fmt::Display) -> Self {
        Self {
            retry: Retry::Permanent,
            message: message.to_string(),
            duplicate_id: false,
        }
    }

    /// The broker already holds a different message under this row's
    /// [`message_id`](OutboxMessage::message_id), so it dropped this one as a duplicate: an
    /// alarm, since something else publishes under the outbox's ids. Permanent: the relay parks
    /// the row, logs an error and counts it in
    /// [`OUTBOX_DUPLICATE_IDS_TOTAL`](crate::metrics::OUTBOX_DUPLICATE_IDS_TOTAL). (A broker that
    /// already holds this very message, published by an attempt whose batch did not commit, is
    /// a success, not this error.)
    pub fn duplicate_id(message: impl fmt::Display) -> Self {
        Self {
            retry: Retry::Permanent,
            message: message.to_string(),
            duplicate_id: true,
        }
    }

    /// Whether to retry.
    pub fn retry(&self) -> Retry {
        self.retry
    }

    /// What went wrong.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the broker held another message under the row's message id (see
    /// [`PublishError::duplicate_id`]).
    pub fn is_duplicate_id(&self) -> bool {
        self.duplicate_id
    }
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let retry = match self.retry {
            Retry::Retryable => "retryable",
            Retry::Permanent => "permanent",
        };
        write!(f, "{retry}: {}", self.message)
    }
}

impl std::error::Error for PublishError {}

/// Hands outbox messages to a broker.
///
/// `publish` returns once the broker has the message for good (for JetStream, once the stream
/// acknowledged it): only then does the relay mark the row published. It must send the
/// [`message_id`](OutboxMessage::message_id) in the broker's deduplication header where there is
/// one, so that a message published again after a crash between publishing and marking is
/// dropped by the broker. When the broker reports a duplicate, it should check that what it
/// holds under that id is this message (then the publish succeeded) and otherwise return
/// [`PublishError::duplicate_id`]. It should refuse a topic that fails
/// [`validate_topic`](super::validate_topic) as [`PublishError::permanent`] before sending
/// anything.
///
/// The relay calls it for one message at a time, in order, so that rows of a topic reach the
/// broker in order. An implementation for another broker (RabbitMQ with publisher confirms,
/// Redis Streams with `XADD`) is this one method.
pub trait Publisher: Send + Sync + 'static {
    /// Publishes one message and waits for the broker to acknowledge it.
    fn publish(
        &self,
        message: &OutboxMessage,
    ) -> impl Future<Output = Result<(), PublishError>> + Send;
}
