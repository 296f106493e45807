//! Processed keys: "the work named K is done", recorded in the same transaction as the work's
//! effects, so that work which several jobs may attempt (or that an operator may replay) has its
//! effect once.
//!
//! ```ignore
//! let mut tx = ctx.transaction().await?;
//! if mark_processed(&mut tx, &format!("refund:{order_id}"), None).await?.is_new() {
//!     apply_refund(&mut tx, order_id).await?;
//! }
//! tx.complete().await?; // the key, the refund and "done" commit together
//! ```
//!
//! The key and the effects commit together or not at all: a run that fails after marking rolls
//! the key back with everything else, and the next run marks it again. Two transactions marking
//! the same key at once are serialized by its row: the second waits for the first and sees the
//! key as processed if the first committed. Use the default isolation (`READ COMMITTED`): under
//! `REPEATABLE READ` or `SERIALIZABLE`, a key committed after the transaction's snapshot was
//! taken makes marking fail with a serialization error (retried as a transient failure).
//!
//! Keys live in `jobs_processed_keys`. A key marked with an expiry counts as never recorded
//! once it expires, and retention deletes it; a key without one is kept until deleted by hand.

use std::time::Duration;

use sqlx::PgConnection;

use crate::sql;

/// What [`mark_processed`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "the key says whether the work is still to be done"]
pub enum ProcessedKey {
    /// The key was not recorded (or had expired): it is recorded now, in the caller's
    /// transaction. Do the work.
    New,
    /// A committed transaction recorded the key before, and it has not expired: the work is
    /// done. Skip it.
    AlreadyProcessed,
}

impl ProcessedKey {
    /// Whether the key was recorded by this call, so the work is still to be done.
    pub fn is_new(self) -> bool {
        self == ProcessedKey::New
    }
}

/// Records `key` as processed in the transaction `conn` belongs to, to expire after `keep_for`
/// (`None`: never), and says whether it was already recorded.
///
/// Call it in the transaction that applies the work's effects, before applying them, and apply
/// them only when it returns [`ProcessedKey::New`].
pub async fn mark_processed(
    conn: &mut PgConnection,
    key: &str,
    keep_for: Option<Duration>,
) -> Result<ProcessedKey, sqlx::Error> {
    let recorded: Option<bool> = sqlx::query_scalar(sql::MARK_PROCESSED)
        .bind(key)
        .bind(keep_for.map(|keep_for| keep_for.as_secs_f64()))
        .fetch_optional(conn)
        .await?;
    Ok(match recorded {
        Some(_) => ProcessedKey::New,
        None => ProcessedKey::AlreadyProcessed,
    })
}

/// Whether `key` is recorded as processed (committed, or by the transaction `conn` belongs to)
/// and unexpired. Only a hint: another transaction may record it right after; decide with
/// [`mark_processed`].
pub async fn is_processed(conn: &mut PgConnection, key: &str) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(sql::IS_PROCESSED)
        .bind(key)
        .fetch_one(conn)
        .await
}
