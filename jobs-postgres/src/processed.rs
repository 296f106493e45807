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
//! Keys live in `jobs_processed_keys`, of any length (the table is keyed by a digest of the
//! key). A key marked with an expiry counts as never recorded once it expires, and retention
//! deletes it; a key without one is kept until deleted by hand.
//!
//! A key or an expiry the database cannot store (U+0000 in the key, an expiry past the year
//! 9999) is refused before the database is asked, so the caller's transaction is left as it was.

use std::time::Duration;

use jobs_core::{ClassifyError, ErrorClass, ErrorClassifier};
use sqlx::PgConnection;

use crate::store::processed as store;

/// The latest expiry a processed key can have: the end of the year 9999 (UTC), as for a job's
/// ready time.
const LATEST_EXPIRY: chrono::DateTime<chrono::Utc> =
    chrono::DateTime::from_timestamp(253_402_300_799, 0)
        .expect("the end of the year 9999 is a valid time");

/// Why [`mark_processed`] or [`is_processed`] gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum ProcessedKeyError {
    /// The key holds U+0000, which PostgreSQL text cannot store. Refused before the database
    /// was asked: the caller's transaction is untouched. Permanent when a job handler returns
    /// it: the same key fails the same way on every attempt.
    #[error("processed key holds U+0000 (at byte {at}), which PostgreSQL text cannot store")]
    KeyHoldsNul {
        /// The byte offset of the first U+0000.
        at: usize,
    },
    /// The key would expire after the year 9999, which PostgreSQL cannot store; keep it with
    /// no expiry (`None`) instead. Refused before the database was asked. Permanent.
    #[error("processed key would expire after the year 9999 (kept for {keep_for:?}): keep it with no expiry instead")]
    ExpiryOutOfRange {
        /// The requested retention.
        keep_for: Duration,
    },
    /// The database did not answer. Transient.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

impl ClassifyError for ProcessedKeyError {
    fn class(&self) -> ErrorClass {
        match self {
            ProcessedKeyError::KeyHoldsNul { .. } | ProcessedKeyError::ExpiryOutOfRange { .. } => {
                ErrorClass::Permanent
            }
            ProcessedKeyError::Database(_) => ErrorClass::Transient,
        }
    }
}

jobs_core::__private::inventory::submit!(ErrorClassifier::of::<ProcessedKeyError>());

/// Refuses a key PostgreSQL text cannot hold.
fn check_key(key: &str) -> Result<(), ProcessedKeyError> {
    match key.find('\0') {
        Some(at) => Err(ProcessedKeyError::KeyHoldsNul { at }),
        None => Ok(()),
    }
}

/// Refuses a retention that would end after the year 9999.
fn check_keep_for(keep_for: Option<Duration>) -> Result<(), ProcessedKeyError> {
    let Some(keep_for) = keep_for else {
        return Ok(());
    };
    let expiry = chrono::Duration::from_std(keep_for)
        .ok()
        .and_then(|keep_for| chrono::Utc::now().checked_add_signed(keep_for));
    match expiry {
        Some(expiry) if expiry <= LATEST_EXPIRY => Ok(()),
        _ => Err(ProcessedKeyError::ExpiryOutOfRange { keep_for }),
    }
}

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
/// them only when it returns [`ProcessedKey::New`]. A key with U+0000 or an expiry after the
/// year 9999 is refused before the database is asked ([`ProcessedKeyError`]).
pub async fn mark_processed(
    conn: &mut PgConnection,
    key: &str,
    keep_for: Option<Duration>,
) -> Result<ProcessedKey, ProcessedKeyError> {
    check_key(key)?;
    check_keep_for(keep_for)?;
    Ok(if store::mark(conn, key, keep_for).await? {
        ProcessedKey::New
    } else {
        ProcessedKey::AlreadyProcessed
    })
}

/// Whether `key` is recorded as processed (committed, or by the transaction `conn` belongs to)
/// and unexpired. Only a hint: another transaction may record it right after; decide with
/// [`mark_processed`]. A key with U+0000 is refused before the database is asked.
pub async fn is_processed(conn: &mut PgConnection, key: &str) -> Result<bool, ProcessedKeyError> {
    check_key(key)?;
    Ok(store::is_recorded(conn, key).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_with_nul_is_refused_with_its_place() {
        assert!(matches!(
            check_key("refund:\0:7"),
            Err(ProcessedKeyError::KeyHoldsNul { at: 7 })
        ));
        assert!(check_key("refund:7").is_ok());
    }

    #[test]
    fn an_expiry_past_the_year_9999_is_refused() {
        assert!(check_keep_for(None).is_ok());
        assert!(check_keep_for(Some(Duration::from_secs(86_400 * 365 * 100))).is_ok());
        assert!(matches!(
            check_keep_for(Some(Duration::MAX)),
            Err(ProcessedKeyError::ExpiryOutOfRange { .. })
        ));
        assert!(matches!(
            check_keep_for(Some(Duration::from_secs(86_400 * 365 * 8_000))),
            Err(ProcessedKeyError::ExpiryOutOfRange { .. })
        ));
    }

    #[test]
    fn refusals_are_permanent_and_database_errors_transient() {
        assert_eq!(
            ProcessedKeyError::KeyHoldsNul { at: 0 }.class(),
            ErrorClass::Permanent
        );
        assert_eq!(
            ProcessedKeyError::Database(sqlx::Error::PoolTimedOut).class(),
            ErrorClass::Transient
        );
    }
}
