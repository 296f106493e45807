//! The migration history's statements: the lock that serializes migrations, and the
//! framework's own history table.

use sqlx::{Executor, PgConnection};

/// Advisory lock key that serializes migrations across processes (`"jobs_migrations"` as bytes).
pub const MIGRATION_LOCK_KEY: i64 = 0x6a6f_6273_5f6d_6967;

/// Takes the migration lock for the current transaction.
pub const LOCK_MIGRATIONS: &str = "SELECT pg_advisory_xact_lock($1)";

/// Creates the framework's own migration history, apart from the application's.
pub const CREATE_MIGRATIONS_TABLE: &str = "
CREATE TABLE IF NOT EXISTS jobs_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)";

/// Whether the migration history exists yet (a read, which needs no CREATE privilege).
pub const MIGRATIONS_TABLE_EXISTS: &str = "SELECT to_regclass('jobs_migrations') IS NOT NULL";

/// Adds the checksum of each migration to a history written before checksums were recorded.
pub const ADD_MIGRATION_CHECKSUMS: &str =
    "ALTER TABLE jobs_migrations ADD COLUMN IF NOT EXISTS checksum text";

/// Versions, names and checksums already applied. The checksum is read through the row's JSON
/// so that a history without the column (written by an older version) reads as NULL checksums.
pub const APPLIED_MIGRATIONS: &str = "
SELECT version, name, to_jsonb(m) ->> 'checksum' AS checksum
FROM jobs_migrations AS m ORDER BY version";

/// Records one applied migration with its checksum.
pub const RECORD_MIGRATION: &str =
    "INSERT INTO jobs_migrations (version, name, checksum) VALUES ($1, $2, $3)";

/// Records the checksum `$2` of migration `$1`, applied before checksums were recorded.
pub const RECORD_MIGRATION_CHECKSUM: &str =
    "UPDATE jobs_migrations SET checksum = $2 WHERE version = $1 AND checksum IS NULL";

/// One row of the history: version, name and checksum (NULL when applied by a version that did
/// not record checksums).
pub(crate) type AppliedMigration = (i32, String, Option<String>);

/// The history, read without writing or locking anything; `None` when there is none yet.
pub(crate) async fn read_history(
    conn: &mut PgConnection,
) -> Result<Option<Vec<AppliedMigration>>, sqlx::Error> {
    let exists: bool = sqlx::query_scalar(MIGRATIONS_TABLE_EXISTS)
        .fetch_one(&mut *conn)
        .await?;
    if !exists {
        return Ok(None);
    }
    let applied = sqlx::query_as(APPLIED_MIGRATIONS)
        .fetch_all(&mut *conn)
        .await?;
    Ok(Some(applied))
}

/// Takes the migration lock for the transaction `tx` belongs to, creates the history (or adds
/// checksums to an old one) when needed, and reads it.
pub(crate) async fn lock_history(
    tx: &mut PgConnection,
) -> Result<Vec<AppliedMigration>, sqlx::Error> {
    sqlx::query(LOCK_MIGRATIONS)
        .bind(MIGRATION_LOCK_KEY)
        .execute(&mut *tx)
        .await?;
    sqlx::query(CREATE_MIGRATIONS_TABLE)
        .execute(&mut *tx)
        .await?;
    sqlx::query(ADD_MIGRATION_CHECKSUMS)
        .execute(&mut *tx)
        .await?;
    sqlx::query_as(APPLIED_MIGRATIONS).fetch_all(&mut *tx).await
}

/// Records `checksum` for migration `version`, applied before checksums were recorded.
pub(crate) async fn record_checksum(
    tx: &mut PgConnection,
    version: i32,
    checksum: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(RECORD_MIGRATION_CHECKSUM)
        .bind(version)
        .bind(checksum)
        .execute(&mut *tx)
        .await
        .map(drop)
}

/// Runs migration `version` (`name`, its statements `sql`) and records it with `checksum`.
pub(crate) async fn apply(
    tx: &mut PgConnection,
    version: i32,
    name: &str,
    sql: &'static str,
    checksum: &str,
) -> Result<(), sqlx::Error> {
    // A plain string runs through the simple protocol, which allows many statements.
    tx.execute(sql).await?;
    sqlx::query(RECORD_MIGRATION)
        .bind(version)
        .bind(name)
        .bind(checksum)
        .execute(&mut *tx)
        .await
        .map(drop)
}
