//! The transactional outbox: writing events, claiming them for the relay, recording what the
//! broker said, and parked rows.

use std::time::Duration;

use sqlx::types::Json;
use sqlx::{FromRow, PgConnection, PgPool};

use crate::outbox::OutboxId;

/// Writes one outbox row: `$1` topic, `$2` payload. Returns its id.
pub const INSERT_OUTBOX: &str =
    "INSERT INTO jobs_outbox (topic, payload) VALUES ($1, $2) RETURNING id";

/// Claims up to `$1` due pending outbox rows, by id, locking them (`FOR UPDATE SKIP LOCKED`) for
/// the relay's transaction. Run in that transaction, which publishes them and records the
/// outcomes before it commits.
///
/// A row whose topic has an earlier pending row still backing off is not claimed (rows back off
/// only after a failed attempt: the `jobs_outbox_retrying` index holds just those). Each claimed
/// row comes back with `held_back`: true when an earlier pending row of its topic is outside
/// this claim (held by another relay, or not yet due), found once per topic as its first
/// pending row outside the claim: such a row must not be published in this batch, or its
/// topic's order would break. Rows come back by id, with their message id and the attempts
/// made so far.
pub const CLAIM_OUTBOX: &str = "
WITH claimed AS (
    SELECT o.id, o.message_id, o.topic, o.payload, o.attempts, o.created_at
    FROM jobs_outbox AS o
    WHERE o.state = 'pending' AND o.next_attempt_at <= now()
      AND NOT EXISTS (
          SELECT 1 FROM jobs_outbox AS earlier
          WHERE earlier.state = 'pending' AND earlier.attempts > 0
            AND earlier.topic = o.topic AND earlier.id < o.id
            AND earlier.next_attempt_at > now())
    ORDER BY o.id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), topics AS MATERIALIZED (
    SELECT t.topic,
           (SELECT earlier.id FROM jobs_outbox AS earlier
            WHERE earlier.state = 'pending' AND earlier.topic = t.topic
              AND earlier.id NOT IN (SELECT id FROM claimed)
            ORDER BY earlier.id
            LIMIT 1) AS first_unclaimed
    FROM (SELECT DISTINCT topic FROM claimed) AS t
)
SELECT c.id, c.message_id, c.topic, c.payload::text AS payload, c.attempts,
       extract(epoch FROM c.created_at)::float8 AS created_epoch,
       coalesce(topics.first_unclaimed < c.id, false) AS held_back
FROM claimed AS c JOIN topics ON topics.topic = c.topic
ORDER BY c.id";

/// Records what a relay's batch did, one element per row attempted: `$1` ids, `$2` new states
/// (`published`, `pending` to retry, `parked`), `$3` seconds until a retried row is due again,
/// `$4` errors (NULL after a success), `$5` whether the row draws a new message id (parked
/// because the broker holds another message under its id: a replay then publishes under the new
/// one instead of being dropped again). Each row's attempts grow by one; an error replaces its
/// last error. Only pending rows are written. Returns how many rows were written.
pub const RECORD_OUTBOX_OUTCOMES: &str = "
WITH recorded AS (
    UPDATE jobs_outbox AS o
    SET state = r.state,
        message_id = CASE WHEN r.new_message_id THEN gen_random_uuid() ELSE o.message_id END,
        attempts = o.attempts + 1,
        last_error = coalesce(r.error, o.last_error),
        next_attempt_at = CASE WHEN r.state = 'pending'
                               THEN statement_timestamp() + make_interval(secs => r.delay_secs)
                               ELSE o.next_attempt_at END,
        published_at = CASE WHEN r.state = 'published' THEN statement_timestamp() END,
        parked_at = CASE WHEN r.state = 'parked' THEN statement_timestamp() END
    FROM unnest($1::bigint[], $2::text[], $3::float8[], $4::text[], $5::bool[])
         AS r(id, state, delay_secs, error, new_message_id)
    WHERE o.id = r.id AND o.state = 'pending'
    RETURNING 1
)
SELECT count(*) FROM recorded";

/// Lists up to `$2` parked outbox rows of topic `$3` (NULL for any) with an id above `$1`, by
/// id.
pub const LIST_PARKED: &str = "
SELECT id, topic, payload, attempts, last_error,
       extract(epoch FROM now() - created_at)::float8 AS age_secs,
       extract(epoch FROM now() - parked_at)::float8 AS parked_for_secs
FROM jobs_outbox
WHERE state = 'parked' AND id > $1 AND ($3::text IS NULL OR topic = $3)
ORDER BY id
LIMIT $2";

/// The condition selecting the parked outbox rows a replay takes, shared by [`REPLAY_PARKED`]
/// and [`PREVIEW_REPLAY_PARKED`]: ids `$1` (NULL for every parked row), above `$2`, with a valid
/// topic (a row written before topics were checked stays parked: see [`REPLAY_PARKED`]).
macro_rules! parked_rows_matching {
    () => {
        "state = 'parked' AND id > $2 AND ($1::bigint[] IS NULL OR id = ANY($1))
      AND jobs_outbox_topic_is_valid(topic)"
    };
}

/// Makes up to `$3` parked outbox rows with an id above `$2` pending again, by id: those of ids
/// `$1` (NULL for every parked row), due at once with their attempts reset to 0 and their last
/// error kept. A row whose topic is not valid (written before topics were checked) stays
/// parked: it could never be published, and the table refuses it as pending. Returns the ids
/// made pending.
pub const REPLAY_PARKED: &str = concat!(
    "
WITH candidates AS (
    SELECT id FROM jobs_outbox
    WHERE ",
    parked_rows_matching!(),
    "
    ORDER BY id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs_outbox AS o
SET state = 'pending', attempts = 0, next_attempt_at = now(), parked_at = NULL
FROM candidates
WHERE o.id = candidates.id
RETURNING o.id"
);

/// What [`REPLAY_PARKED`] would make pending, changing nothing: up to `$3` parked rows with an
/// id above `$2`, by id, those of ids `$1` (NULL for every parked row).
pub const PREVIEW_REPLAY_PARKED: &str = concat!(
    "SELECT id FROM jobs_outbox WHERE ",
    parked_rows_matching!(),
    " ORDER BY id LIMIT $3"
);

/// A parked row as [`LIST_PARKED`] returns it.
#[derive(FromRow)]
pub(crate) struct ParkedRecord {
    pub(crate) id: OutboxId,
    pub(crate) topic: String,
    pub(crate) payload: Json<serde_json::Value>,
    pub(crate) attempts: i32,
    pub(crate) last_error: Option<String>,
    pub(crate) age_secs: f64,
    pub(crate) parked_for_secs: f64,
}

/// Up to `limit` parked rows (of `topic`, or of any) with an id above `after`, by id.
pub(crate) async fn list_parked(
    pool: &PgPool,
    topic: Option<&str>,
    after: OutboxId,
    limit: usize,
) -> Result<Vec<ParkedRecord>, sqlx::Error> {
    sqlx::query_as(LIST_PARKED)
        .bind(after)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(topic)
        .fetch_all(pool)
        .await
}

/// Makes up to `limit` parked rows of `ids` (all when `None`) with an id above `after` pending
/// again; returns their ids, in no particular order.
pub(crate) async fn replay_parked(
    pool: &PgPool,
    ids: Option<&[OutboxId]>,
    after: OutboxId,
    limit: usize,
) -> Result<Vec<OutboxId>, sqlx::Error> {
    sqlx::query_scalar(REPLAY_PARKED)
        .bind(ids)
        .bind(after)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(pool)
        .await
}

/// The ids [`replay_parked`] would make pending, by id, changing nothing.
pub(crate) async fn preview_replay_parked(
    pool: &PgPool,
    ids: Option<&[OutboxId]>,
    after: OutboxId,
    limit: usize,
) -> Result<Vec<OutboxId>, sqlx::Error> {
    sqlx::query_scalar(PREVIEW_REPLAY_PARKED)
        .bind(ids)
        .bind(after)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(pool)
        .await
}

/// One row of [`CLAIM_OUTBOX`].
#[derive(FromRow)]
pub(crate) struct ClaimedRow {
    pub(crate) id: OutboxId,
    pub(crate) message_id: uuid::Uuid,
    pub(crate) topic: String,
    pub(crate) payload: String,
    pub(crate) attempts: i32,
    pub(crate) created_epoch: f64,
    pub(crate) held_back: bool,
}

/// The outcomes of a batch, as the arrays [`RECORD_OUTBOX_OUTCOMES`] takes.
#[derive(Default)]
pub(crate) struct OutboxOutcomes {
    pub(crate) ids: Vec<OutboxId>,
    states: Vec<&'static str>,
    delays: Vec<f64>,
    errors: Vec<Option<String>>,
    new_message_ids: Vec<bool>,
}

impl OutboxOutcomes {
    /// Adds the outcome of row `id`: its new state, the delay before it is due again, and
    /// the error of the attempt, if any.
    pub(crate) fn push(
        &mut self,
        id: OutboxId,
        state: &'static str,
        delay: Duration,
        error: Option<String>,
    ) {
        self.ids.push(id);
        self.states.push(state);
        self.delays.push(delay.as_secs_f64());
        self.errors.push(error);
        self.new_message_ids.push(false);
    }

    /// Parks a row whose message id the broker holds for another message, drawing it a new id
    /// so that a replay is not dropped again.
    pub(crate) fn park_under_new_id(&mut self, id: OutboxId, error: Option<String>) {
        self.push(id, "parked", Duration::ZERO, error);
        if let Some(new_message_id) = self.new_message_ids.last_mut() {
            *new_message_id = true;
        }
    }
}

/// Writes one event of `topic` in the transaction `conn` belongs to; returns its id.
pub(crate) async fn insert_outbox(
    conn: &mut PgConnection,
    topic: &str,
    payload: &serde_json::Value,
) -> Result<OutboxId, sqlx::Error> {
    sqlx::query_scalar(INSERT_OUTBOX)
        .bind(topic)
        .bind(Json(payload))
        .fetch_one(&mut *conn)
        .await
}

/// Claims up to `batch_size` due pending rows, by id, in the transaction `conn` belongs to.
pub(crate) async fn claim_outbox(
    conn: &mut PgConnection,
    batch_size: usize,
) -> Result<Vec<ClaimedRow>, sqlx::Error> {
    sqlx::query_as(CLAIM_OUTBOX)
        .bind(i64::try_from(batch_size).unwrap_or(i64::MAX))
        .fetch_all(&mut *conn)
        .await
}

/// Records a batch's outcomes in the transaction `conn` belongs to (nothing when empty).
pub(crate) async fn record_outbox_outcomes(
    conn: &mut PgConnection,
    outcomes: &OutboxOutcomes,
) -> Result<(), sqlx::Error> {
    if outcomes.ids.is_empty() {
        return Ok(());
    }
    sqlx::query_scalar::<_, i64>(RECORD_OUTBOX_OUTCOMES)
        .bind(&outcomes.ids)
        .bind(&outcomes.states)
        .bind(&outcomes.delays)
        .bind(&outcomes.errors)
        .bind(&outcomes.new_message_ids)
        .fetch_one(&mut *conn)
        .await
        .map(drop)
}
