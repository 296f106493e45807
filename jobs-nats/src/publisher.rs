//! [`NatsPublisher`]: the [`Publisher`] for NATS JetStream.

use async_nats::jetstream::context::{PublishError as NatsPublishError, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::publish::PublishAck;
use async_nats::jetstream::stream::RawMessageErrorKind;
use async_nats::jetstream::{Context, ErrorCode};
use bytes::Bytes;
use jobs_postgres::outbox::{validate_topic, OutboxMessage, PublishError, Publisher};

/// Publishes outbox rows to JetStream: subject `<prefix><topic>`, `Nats-Msg-Id` the row's
/// [`message_id`](OutboxMessage::message_id) (a uuid), payload the row's JSON; each publish
/// awaits the stream's acknowledgement (or the context's timeout, 5 s unless set otherwise on
/// the [`Context`]).
///
/// Failures are retryable (the server unreachable, no answer in time, no stream for the subject,
/// any other refusal) except those no retry can fix, whose row is parked: a topic that fails
/// [`validate_topic`] (checked before anything is sent, so that no topic can inject into the
/// NATS protocol), and a message larger than the server or the stream accepts.
///
/// **Duplicates.** When the stream acknowledges a publish as a duplicate (it already holds a
/// message with that `Nats-Msg-Id` within its duplicate window), the publisher reads the message
/// the stream holds at the acknowledged sequence. The same subject and payload: this row,
/// published by an attempt whose batch did not commit (a relay crash, a restore, a failover),
/// and the publish succeeded. Anything else: [`PublishError::duplicate_id`], and the relay parks
/// the row loudly instead of marking it published while the stream dropped it. When that message
/// is no longer in the stream (consumed from a work-queue stream, or expired) there is nothing
/// to compare: a uuid is not drawn twice, so it is taken as this row's own earlier publish, with
/// a warning. Reading it needs the permission to get stream messages
/// (`$JS.API.STREAM.MSG.GET.<stream>`); without it the row retries.
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
    /// `orders.placed` to `events.orders.placed`). It follows the rules of topics
    /// ([`validate_topic`]); a prefix that does not fails every publish as retryable, so rows
    /// wait, with the reason as their last error, until it is fixed.
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
        validate_topic(&message.topic)
            .map_err(|error| PublishError::permanent(format!("not published: {error}")))?;
        self.check_prefix()?;
        let subject = self.subject(&message.topic);
        let publish = PublishMessage::build()
            .message_id(message.message_id.to_string())
            .payload(Bytes::from(message.payload.clone()));
        let ack = self
            .jetstream
            .send_publish(subject.clone(), publish)
            .await
            .map_err(|error| classify(&subject, &error))?;
        let ack = ack.await.map_err(|error| classify(&subject, &error))?;
        if ack.duplicate {
            self.confirm_duplicate(&subject, message, &ack).await?;
        }
        Ok(())
    }
}

impl NatsPublisher {
    /// Refuses a subject prefix that would make bad subjects of good topics (whitespace, control
    /// characters, wildcards, empty tokens): retryable, so that rows wait for the prefix to be
    /// fixed rather than being parked for it.
    fn check_prefix(&self) -> Result<(), PublishError> {
        if self.subject_prefix.is_empty() {
            return Ok(());
        }
        // A prefix is good when it makes a valid subject of a one-letter topic.
        validate_topic(&format!("{}x", self.subject_prefix)).map_err(|error| {
            PublishError::retryable(format!(
                "not published: the NatsPublisher's subject prefix `{}` is not valid ({error}); fix the prefix",
                self.subject_prefix.escape_debug()
            ))
        })
    }

    /// After a duplicate acknowledgement: succeeds when the message the stream holds under the
    /// id is this one (same subject and payload), or is gone; fails as
    /// [`PublishError::duplicate_id`] when it is another.
    async fn confirm_duplicate(
        &self,
        subject: &str,
        message: &OutboxMessage,
        ack: &PublishAck,
    ) -> Result<(), PublishError> {
        let lookup = |error: &dyn std::fmt::Display| {
            PublishError::retryable(format!(
                "publishing to {subject}: the stream {} reported message id {} as a duplicate of its message {}, which could not be read to compare: {error}",
                ack.stream, message.message_id, ack.sequence
            ))
        };
        let stream = self
            .jetstream
            .get_stream_no_info(&ack.stream)
            .await
            .map_err(|error| lookup(&error))?;
        let held = match stream.get_raw_message(ack.sequence).await {
            Ok(held) => held,
            Err(error) if error.kind() == RawMessageErrorKind::NoMessageFound => {
                tracing::warn!(
                    outbox.id = message.id,
                    outbox.message_id = %message.message_id,
                    stream = %ack.stream,
                    sequence = ack.sequence,
                    "the stream reported this outbox row as a duplicate of a message it no longer holds: taken as the row's own earlier publish"
                );
                return Ok(());
            }
            Err(error) => return Err(lookup(&error)),
        };
        if held.subject.as_str() == subject && held.payload == message.payload.as_bytes() {
            return Ok(());
        }
        Err(PublishError::duplicate_id(format!(
            "publishing to {subject}: dropped as a duplicate, the stream {} already holds another message under message id {} (sequence {}, subject {}): something else publishes under this outbox's message ids",
            ack.stream, message.message_id, ack.sequence, held.subject
        )))
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
