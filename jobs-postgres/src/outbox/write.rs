//! Writing outbox rows in the caller's transaction: [`publish_in`] and [`publish_event_in`].

use serde::Serialize;
use sqlx::PgConnection;

use super::topic::{validate_topic, TopicError};
use crate::store::outbox as store;
use jobs_core::payload::{check_payload, encode_payload, PayloadProblem, MAX_PAYLOAD_DEPTH};

/// The id of an outbox row: it grows in the order rows are written, which is the order the relay
/// publishes a topic's rows in. (The broker's message id is the row's `message_id`, a uuid: see
/// [`OutboxMessage::message_id`](super::OutboxMessage::message_id).)
pub type OutboxId = i64;

/// An event with a fixed topic, for [`publish_event_in`].
///
/// Carry ids, not snapshots: the event may be published (and consumed) minutes after it was
/// written, once the data it points to has changed; the consumer loads the current state.
///
/// ```
/// use jobs_postgres::outbox::Event;
///
/// #[derive(serde::Serialize)]
/// struct OrderPlaced {
///     order_id: i64,
/// }
///
/// impl Event for OrderPlaced {
///     const TOPIC: &'static str = "orders.placed";
/// }
/// ```
pub trait Event: Serialize {
    /// The topic events of this type are published to (for NATS, the subject, after the
    /// publisher's prefix). A stable string: renaming the type must not change it.
    const TOPIC: &'static str;
}

/// Why an outbox row could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    /// The payload could not be encoded as JSON.
    #[error("encoding the payload of an event of topic `{topic}` failed: {source}")]
    Encode {
        /// The topic.
        topic: String,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },
    /// The topic is not valid (see [`validate_topic`]): nothing was written.
    #[error(transparent)]
    InvalidTopic(#[from] TopicError),
    /// The payload holds U+0000, which PostgreSQL's `jsonb` cannot store: nothing was written.
    #[error("the payload of an event of topic `{topic}` holds a NUL character (U+0000) at `{field}`, which PostgreSQL cannot store")]
    NulInPayload {
        /// The topic.
        topic: String,
        /// Where, named as for a job's arguments: `payload.order.notes[1]`, or
        /// `payload.field (key)` when an object key holds it.
        field: String,
    },
    /// The payload nests arrays and objects deeper than [`MAX_PAYLOAD_DEPTH`], the most a JSON
    /// decoder such as `serde_json` reads: nothing was written. Found without recursing past the
    /// limit, so a payload thousands of levels deep cannot overflow the stack.
    #[error(
        "the payload of an event of topic `{topic}` nests deeper than {limit} arrays or objects"
    )]
    TooDeep {
        /// The topic.
        topic: String,
        /// The deepest nesting allowed.
        limit: usize,
    },
    /// The database refused the write.
    #[error("writing to the outbox failed: {0}")]
    Database(#[from] sqlx::Error),
}

/// Writes an event of `topic` with `payload` (encoded as JSON) to the outbox on `conn`: in the
/// caller's transaction when `conn` is one, so the event exists exactly when the transaction
/// commits. A relay publishes it later (see [`Relay`](super::Relay)).
///
/// The topic must be valid ([`validate_topic`]: dot-separated tokens, no whitespace, control
/// characters or wildcards, at most 255 bytes) and the payload free of U+0000. Either mistake is
/// refused before anything is sent to the database, so the caller's transaction is untouched
/// and can still commit its other work.
///
/// ```no_run
/// # async fn place_order(pool: &sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let mut tx = pool.begin().await?;
/// let order_id: i64 = sqlx::query_scalar("INSERT INTO orders (total_cents) VALUES (1250) RETURNING id")
///     .fetch_one(&mut *tx)
///     .await?;
/// jobs_postgres::outbox::publish_in(&mut tx, "orders.placed", &serde_json::json!({ "order_id": order_id })).await?;
/// tx.commit().await?; // the order and its event, or neither
/// # Ok(())
/// # }
/// ```
pub async fn publish_in<T: Serialize + ?Sized>(
    conn: &mut PgConnection,
    topic: &str,
    payload: &T,
) -> Result<OutboxId, OutboxError> {
    validate_topic(topic)?;
    let refused = |problem| match problem {
        PayloadProblem::TooDeep => OutboxError::TooDeep {
            topic: topic.to_owned(),
            limit: MAX_PAYLOAD_DEPTH,
        },
        PayloadProblem::NulCharacter(field) => OutboxError::NulInPayload {
            topic: topic.to_owned(),
            field,
        },
    };
    let payload = encode_payload(payload).map_err(|error| match error {
        Ok(problem) => refused(problem),
        Err(source) => OutboxError::Encode {
            topic: topic.to_owned(),
            source,
        },
    })?;
    check_payload(&payload).map_err(refused)?;
    Ok(store::insert_outbox(conn, topic, &payload).await?)
}

/// Writes `event` to the outbox under its type's [`Event::TOPIC`]: [`publish_in`], typed.
pub async fn publish_event_in<E: Event + ?Sized>(
    conn: &mut PgConnection,
    event: &E,
) -> Result<OutboxId, OutboxError> {
    publish_in(conn, E::TOPIC, event).await
}
