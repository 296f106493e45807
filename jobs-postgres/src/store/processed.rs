//! Processed keys: recording that the work named by a key is done.

use std::time::Duration;

use sqlx::PgConnection;

/// Records processed key `$1`, to expire `$2` seconds from now (never when `NULL`), unless it is
/// already recorded and unexpired; returns a row only when this statement recorded it. A key
/// recorded by a transaction still open makes this statement wait for that transaction: it then
/// counts as recorded if that transaction committed, and is recorded here if it rolled back.
/// Keys are told apart by their digest (the table's primary key), as dedupe keys are.
pub const MARK_PROCESSED: &str = "
INSERT INTO jobs_processed_keys AS k (key, expires_at)
VALUES ($1, now() + make_interval(secs => $2))
ON CONFLICT (key_digest) DO UPDATE
    SET processed_at = now(), expires_at = EXCLUDED.expires_at
    WHERE k.expires_at IS NOT NULL AND k.expires_at <= now()
RETURNING true";

/// Whether processed key `$1` is recorded and unexpired.
pub const IS_PROCESSED: &str = concat!(
    "
SELECT EXISTS (
    SELECT 1 FROM jobs_processed_keys
    WHERE key_digest = ",
    dedupe_digest!("$1::text"),
    " AND (expires_at IS NULL OR expires_at > now()))"
);

/// Records `key` in the transaction `conn` belongs to, to expire after `keep_for` (`None`:
/// never); `true` when this call recorded it, `false` when it was recorded and unexpired.
pub(crate) async fn mark(
    conn: &mut PgConnection,
    key: &str,
    keep_for: Option<Duration>,
) -> Result<bool, sqlx::Error> {
    let recorded: Option<bool> = sqlx::query_scalar(MARK_PROCESSED)
        .bind(key)
        .bind(keep_for.map(|keep_for| keep_for.as_secs_f64()))
        .fetch_optional(conn)
        .await?;
    Ok(recorded.is_some())
}

/// Whether `key` is recorded and unexpired, as the transaction `conn` belongs to sees it.
pub(crate) async fn is_recorded(conn: &mut PgConnection, key: &str) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(IS_PROCESSED)
        .bind(key)
        .fetch_one(conn)
        .await
}
