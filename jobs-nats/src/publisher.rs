//! [`NatsPublisher`]: the [`Publisher`] for NATS JetStream.

use async_nats::jetstream::context::{PublishError as NatsPublishError, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{Context, ErrorCode};
use bytes::Bytes;
use jobs_postgres::outbox::{OutboxMessage, PublishError, Publisher};

/// Publishes outbox rows to JetStream: subject `<prefix><topic>`, `Nats-Msg-Id` the row's id,
/// payload the row's JSON; each publish awaits the stream's acknowledgement (or the context's
/// timeout, 5 s unless set otherwise on the [`Context`]).
///
/// Failures are retryable (the server unreachable, no answer in time, no stream for the subject,
/// any other refusal) except a message larger than the server or the stream accepts, which no
/// retry can fix: that row is parked.
#[derive(Debug, Clone)]
pub struct NatsPublisher {
    jetstream: Context,
    subject_prefix: String,
}

impl NatsPublisher {
    /// A publisher on `jetstream`, subjects being the topics as they are.
    pub fn new(jetstream: Context) -> Self {
        Self {
            jetstream,
            subject_prefix: String::new(),
        }
    }

    /// Prepends `prefix` to every topic to make its subject (`"events."` publishes topic
    /// `orders.placed` to `events.orders.placed`).
    #[must_use]
    pub fn subject_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.subject_prefix = prefix.into();
        self
    }

    /// The subject a row of `topic` is published to.
    pub fn subject(&self, topic: &str) -> String {
        format!("{}{topic}", self.subject_prefix)
    }

    /// The JetStream context it publishes with.
    pub fn jetstream(&self) -> &Context {
        &self.jetstream
    }
}

impl Publisher for NatsPublisher {
    async fn publish(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        let max_payload = self.jetstream.client().server_info().max_payload;
        if max_payload > 0 && message.payload.len() > max_payload {
            return Err(PublishError::permanent(format!(
                "the payload is {} bytes, more than the server's max_payload of {max_payload}",
                message.payload.len()
            )));
        }
        let subject = self.subject(&message.topic);
        let publish = PublishMessage::build()
            .message_id(message.message_id())
            .payload(Bytes::from(message.payload.clone()));
        let ack = self
            .jetstream
            .send_publish(subject.clone(), publish)
            .await
            .map_err(|error| classify(&subject, &error))?;
        ack.await.map_err(|error| classify(&subject, &error))?;
        Ok(())
    }
}

/// Whether a JetStream publish error is worth retrying, with a message naming the subject.
fn classify(subject: &str, error: &NatsPublishError) -> PublishError {
    let too_large = error.kind() == PublishErrorKind::Other
        && std::error::Error::source(error)
            .and_then(|source| source.downcast_ref::<async_nats::jetstream::Error>())
            .is_some_and(|api| api.error_code() == ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM);
    let text = match error.kind() {
        PublishErrorKind::StreamNotFound => {
            format!("publishing to {subject}: no stream captures this subject")
        }
        _ => format!("publishing to {subject}: {error}"),
    };
    if too_large {
        PublishError::permanent(text)
    } else {
        PublishError::retryable(text)
    }
}
