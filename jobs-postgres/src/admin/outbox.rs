//! Parked outbox rows: list them, and replay them once the cause is fixed.

use std::time::Duration;

use sqlx::PgPool;

use super::stats::seconds;
use super::AdminError;
use crate::outbox::OutboxId;
use crate::store::outbox as store;

/// Parked rows replayed per statement.
pub const BATCH_SIZE: usize = 1_000;

/// A parked outbox row, as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct ParkedRow {
    /// Its id.
    pub id: OutboxId,
    /// Its topic.
    pub topic: String,
    /// Its payload.
    pub payload: serde_json::Value,
    /// Publish attempts made.
    pub attempts: u32,
    /// The error of its last attempt.
    pub last_error: Option<String>,
    /// How long ago it was written.
    pub age: Duration,
    /// How long it has been parked.
    pub parked_for: Duration,
}

/// Up to `limit` parked rows (of `topic`, or of any) with an id above `after`, by id; pass the
/// last id seen as `after` to page.
pub async fn list_parked(
    pool: &PgPool,
    topic: Option<&str>,
    after: OutboxId,
    limit: usize,
) -> Result<Vec<ParkedRow>, AdminError> {
    let records = store::list_parked(pool, topic, after, limit).await?;
    Ok(records
        .into_iter()
        .map(|record| ParkedRow {
            id: record.id,
            topic: record.topic,
            payload: record.payload.0,
            attempts: u32::try_from(record.attempts).unwrap_or(0),
            last_error: record.last_error,
            age: seconds(record.age_secs).unwrap_or_default(),
            parked_for: seconds(record.parked_for_secs).unwrap_or_default(),
        })
        .collect())
}

/// Makes parked rows pending again, due at once with their attempts reset (their last error
/// kept): those of `ids`, or every parked row when `ids` is `None`. Returns the ids replayed, in
/// order; rows not parked are left alone, so it is safe to repeat.
///
/// A replayed row is published before the rows of its topic still pending (its id is older)
/// and after those already published: parking it let them go on.
pub async fn replay_parked(
    pool: &PgPool,
    ids: Option<&[OutboxId]>,
) -> Result<Vec<OutboxId>, AdminError> {
    let mut replayed = Vec::new();
    let mut after: OutboxId = 0;
    loop {
        let mut batch = store::replay_parked(pool, ids, after, BATCH_SIZE).await?;
        batch.sort_unstable();
        let full = batch.len() == BATCH_SIZE;
        if let Some(last) = batch.last() {
            after = *last;
        }
        replayed.extend(batch);
        if !full {
            return Ok(replayed);
        }
    }
}

/// What [`replay_parked`] would make pending now, changing nothing: the parked rows of `ids`, or
/// every parked row when `ids` is `None`, by id, read in batches of [`BATCH_SIZE`] without
/// locking anything.
pub async fn preview_replay_parked(
    pool: &PgPool,
    ids: Option<&[OutboxId]>,
) -> Result<Vec<OutboxId>, AdminError> {
    let mut parked = Vec::new();
    let mut after: OutboxId = 0;
    loop {
        let batch = store::preview_replay_parked(pool, ids, after, BATCH_SIZE).await?;
        let full = batch.len() == BATCH_SIZE;
        if let Some(last) = batch.last() {
            after = *last;
        }
        parked.extend(batch);
        if !full {
            return Ok(parked);
        }
    }
}
