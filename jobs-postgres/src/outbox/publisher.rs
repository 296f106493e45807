//! The seam to a broker: [`Publisher`], what it is handed ([`OutboxMessage`]) and how it fails
//! ([`PublishError`]).

use std::fmt;
use std::future::Future;

use chrono::{DateTime, Utc};

use super::OutboxId;

/// One outbox row, as handed to a [`Publisher`].
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxMessage {
    /// The row's id; also the message id (see [`OutboxMessage::message_id`]).
    pub id: OutboxId,
    /// The topic it was written with.
    pub topic: String,
    /// The payload, as JSON text.
    pub payload: String,
    /// Which attempt this is, starting at 1. Above 1, an earlier attempt failed, or succeeded
    /// without being recorded (the relay crashed between publishing and marking).
    pub attempt: u32,
    /// When the row was written (its transaction's start).
    pub created_at: DateTime<Utc>,
}

impl OutboxMessage {
    /// The id a broker deduplicates on: the row's id in decimal, the same on every attempt.
    ///
    /// ```
    /// # use jobs_postgres::outbox::OutboxMessage;
    /// let message = OutboxMessage {
    ///     id: 42,
    ///     topic: "orders.placed".into(),
    ///     payload: r#"{"order_id":1042}"#.into(),
    ///     attempt: 1,
    ///     created_at: chrono::DateTime::UNIX_EPOCH,
    /// };
    /// assert_eq!(message.message_id(), "42");
    /// ```
    pub fn message_id(&self) -> String {
        self.id.to_string()
    }
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
}

impl PublishError {
    /// A failure worth retrying.
    pub fn retryable(message: impl fmt::Display) -> Self {
        Self {
            retry: Retry::Retryable,
            message: message.to_string(),
        }
    }

    /// A failure no retry can fix.
    pub fn permanent(message: impl fmt::Display) -> Self {
        Self {
            retry: Retry::Permanent,
            message: message.to_string(),
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
/// dropped by the broker.
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
