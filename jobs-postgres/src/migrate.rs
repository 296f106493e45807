//! The framework's schema, as embedded, versioned, append-only migrations.
//!
//! Applied by [`migrate`], which any number of processes may call at once: an advisory lock
//! serializes them and each migration is applied once. The history lives in `jobs_migrations`,
//! apart from the application's own (sqlx's `_sqlx_migrations` or any other), with a checksum
//! of each migration's SQL, so that a migration edited after it was applied is reported instead
//! of silently diverging.
//!
//! A schema already up to date is checked with reads only: a runtime role with no CREATE
//! privilege (see the README's least-privilege recipe) may call [`migrate`] at start-up.

use sha2::{Digest, Sha256};
use sqlx::{PgConnection, PgPool};

use crate::store::migrations::{self, AppliedMigration};
use crate::store::transactions;

/// One embedded migration.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Its version; versions increase by one from 1.
    pub version: i32,
    /// A short name, recorded with the version.
    pub name: &'static str,
    /// The SQL it runs.
    pub sql: &'static str,
}

impl Migration {
    /// The SHA-256 of its SQL in hex, line endings normalized (a checkout that turns `\n` into
    /// `\r\n` does not change it).
    pub fn checksum(&self) -> String {
        let digest = Sha256::digest(self.sql.replace("\r\n", "\n").as_bytes());
        digest.iter().map(|byte| format!("{byte:02x}")).collect()
    }
}

/// A [`Migration`] whose SQL is the file `migrations/<file>` of this crate.
macro_rules! migration {
    ($version:literal, $name:literal, $file:literal) => {
        Migration {
            version: $version,
            name: $name,
            sql: include_str!(concat!("../migrations/", $file)),
        }
    };
}

/// Every migration, oldest first. A released migration is never edited: add a new one.
pub const MIGRATIONS: &[Migration] = &[
    migration!(1, "jobs_queue", "0001_jobs_queue.sql"),
    migration!(2, "operating", "0002_operating.sql"),
    migration!(3, "processed_keys", "0003_processed_keys.sql"),
    migration!(4, "schedules", "0004_schedules.sql"),
    migration!(5, "outbox", "0005_outbox.sql"),
    migration!(6, "dedupe_digest", "0006_dedupe_digest.sql"),
    migration!(7, "outbox_ids_topics", "0007_outbox_ids_topics.sql"),
    migration!(8, "claims_and_gauges", "0008_claims_and_gauges.sql"),
    migration!(9, "processed_key_digest", "0009_processed_key_digest.sql"),
    migration!(10, "operator_controls", "0010_operator_controls.sql"),
    migration!(11, "cancellation", "0011_cancellation.sql"),
    migration!(
        12,
        "workers_and_throughput",
        "0012_workers_and_throughput.sql"
    ),
    migration!(13, "job_search", "0013_job_search.sql"),
    migration!(14, "outputs", "0014_outputs.sql"),
    migration!(15, "workflows", "0015_workflows.sql"),
    migration!(16, "operating_workflows", "0016_operating_workflows.sql"),
    migration!(17, "workflow_steps", "0017_workflow_steps.sql"),
    migration!(18, "rate_limits", "0018_rate_limits.sql"),
    migration!(19, "fair_share", "0019_fair_share.sql"),
    migration!(20, "per_key_limits", "0020_per_key_limits.sql"),
    migration!(21, "per_key_rate_limits", "0021_per_key_rate_limits.sql"),
    migration!(22, "fair_turns", "0022_fair_turns.sql"),
    migration!(23, "key_turns", "0023_key_turns.sql"),
    migration!(24, "limited_claims", "0024_limited_claims.sql"),
];

/// Why the schema could not be brought up to date.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The database refused a statement.
    #[error("migrating the jobs schema failed: {0}")]
    Database(#[from] sqlx::Error),
    /// The database was migrated by a newer version of this crate.
    #[error("the database has jobs migration {found}, newer than the latest this version knows ({known}): upgrade the jobs crate")]
    NewerSchema {
        /// The newest version found in the database.
        found: i32,
        /// The newest version this crate knows.
        known: i32,
    },
    /// An applied migration does not match the one embedded under the same version.
    #[error("jobs migration {version} is recorded as `{recorded}` but this version calls it `{embedded}`")]
    Mismatch {
        /// The version.
        version: i32,
        /// The name in the database.
        recorded: String,
        /// The name embedded in this crate.
        embedded: &'static str,
    },
    /// An applied migration's SQL differs from the one embedded under the same version: one of
    /// them was edited after it was applied, and the schema may not be what this version
    /// expects.
    #[error("jobs migration {version} (`{name}`) was applied with checksum {recorded}, but this version embeds checksum {embedded}: the migration was edited after it was applied")]
    ChecksumMismatch {
        /// The version.
        version: i32,
        /// Its name.
        name: &'static str,
        /// The checksum recorded when it was applied.
        recorded: String,
        /// The checksum of the SQL embedded in this crate.
        embedded: String,
    },
}

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MigrationReport {
    /// Versions applied by this call, oldest first (empty when already up to date).
    pub applied: Vec<i32>,
}

/// One row of the history.
type Applied = AppliedMigration;

/// What the history says about the embedded migrations.
#[derive(Debug, PartialEq, Eq)]
enum Status {
    /// Every migration is applied and its checksum recorded: nothing to write.
    UpToDate,
    /// Some migration is not applied, or its checksum not recorded.
    Behind,
}

/// Brings the jobs schema up to date, in one transaction, safely from many processes at once.
///
/// When the schema is already up to date it only reads (no lock, no CREATE privilege needed);
/// otherwise it takes the migration lock, reads the history again and applies what is missing.
/// An applied migration whose name or checksum differs from the embedded one is an error.
pub async fn migrate(pool: &PgPool) -> Result<MigrationReport, MigrateError> {
    let mut conn = pool.acquire().await?;
    if read_status(&mut conn).await? == Status::UpToDate {
        return Ok(MigrationReport::default());
    }
    drop(conn);
    let mut tx = transactions::begin_on(pool).await?;
    let applied = migrations::lock_history(&mut tx).await?;
    check_history(&applied)?;
    let mut report = MigrationReport::default();
    for migration in MIGRATIONS {
        match applied
            .iter()
            .find(|(version, _, _)| *version == migration.version)
        {
            Some((_, _, Some(_))) => continue,
            Some((_, _, None)) => {
                migrations::record_checksum(&mut tx, migration.version, &migration.checksum())
                    .await?;
            }
            None => {
                migrations::apply(
                    &mut tx,
                    migration.version,
                    migration.name,
                    migration.sql,
                    &migration.checksum(),
                )
                .await?;
                report.applied.push(migration.version);
            }
        }
    }
    tx.commit().await?;
    if !report.applied.is_empty() {
        tracing::info!(applied = ?report.applied, "jobs schema migrated");
    }
    Ok(report)
}

/// Reads the history without writing or locking anything, and checks it.
async fn read_status(conn: &mut PgConnection) -> Result<Status, MigrateError> {
    let Some(applied) = migrations::read_history(conn).await? else {
        return Ok(Status::Behind);
    };
    check_history(&applied)?;
    let complete = MIGRATIONS.iter().all(|migration| {
        applied
            .iter()
            .any(|(version, _, checksum)| *version == migration.version && checksum.is_some())
    });
    Ok(if complete {
        Status::UpToDate
    } else {
        Status::Behind
    })
}

/// Checks the applied migrations against the embedded ones: no newer version, and the same
/// name and (when recorded) checksum under each version.
fn check_history(applied: &[Applied]) -> Result<(), MigrateError> {
    let known = MIGRATIONS.last().map_or(0, |migration| migration.version);
    if let Some((found, _, _)) = applied.iter().find(|(version, _, _)| *version > known) {
        return Err(MigrateError::NewerSchema {
            found: *found,
            known,
        });
    }
    for migration in MIGRATIONS {
        let Some((_, recorded, checksum)) = applied
            .iter()
            .find(|(version, _, _)| *version == migration.version)
        else {
            continue;
        };
        if recorded != migration.name {
            return Err(MigrateError::Mismatch {
                version: migration.version,
                recorded: recorded.clone(),
                embedded: migration.name,
            });
        }
        if let Some(recorded) = checksum {
            let embedded = migration.checksum();
            if *recorded != embedded {
                return Err(MigrateError::ChecksumMismatch {
                    version: migration.version,
                    name: migration.name,
                    recorded: recorded.clone(),
                    embedded,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_ignore_line_endings() {
        let unix = Migration {
            version: 1,
            name: "one",
            sql: "CREATE TABLE t ();\nSELECT 1;\n",
        };
        let windows = Migration {
            sql: "CREATE TABLE t ();\r\nSELECT 1;\r\n",
            ..unix
        };
        assert_eq!(unix.checksum(), windows.checksum());
        assert_eq!(unix.checksum().len(), 64);
        let edited = Migration {
            sql: "CREATE TABLE t ();\nSELECT 2;\n",
            ..unix
        };
        assert_ne!(unix.checksum(), edited.checksum());
    }
}

/// Where the database's jobs schema stands against the migrations this version embeds, as
/// [`schema_status`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaStatus {
    /// Every embedded migration is applied.
    UpToDate,
    /// No jobs migration was ever applied to this database.
    Missing,
    /// Some embedded migrations are not applied yet: run [`migrate`].
    Behind {
        /// The newest version applied (0 when the history is empty).
        applied: i32,
        /// The newest version this crate embeds.
        known: i32,
    },
}

/// Reads where the schema stands, without writing or locking anything (no CREATE privilege
/// needed). A schema newer than this version, or a history that does not match the embedded
/// migrations, is an error, as it is for [`migrate`].
pub async fn schema_status(pool: &PgPool) -> Result<SchemaStatus, MigrateError> {
    let mut conn = pool.acquire().await?;
    let Some(applied) = migrations::read_history(&mut conn).await? else {
        return Ok(SchemaStatus::Missing);
    };
    check_history(&applied)?;
    if applied.is_empty() {
        return Ok(SchemaStatus::Missing);
    }
    match read_status(&mut conn).await? {
        Status::UpToDate => Ok(SchemaStatus::UpToDate),
        Status::Behind => Ok(SchemaStatus::Behind {
            applied: applied
                .iter()
                .map(|(version, _, _)| *version)
                .max()
                .unwrap_or(0),
            known: MIGRATIONS.last().map_or(0, |migration| migration.version),
        }),
    }
}
