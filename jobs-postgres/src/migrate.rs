//! The framework's schema, as embedded, versioned, append-only migrations.
//!
//! Applied by [`migrate`], which any number of processes may call at once: an advisory lock
//! serializes them and each migration is applied once. The history lives in `jobs_migrations`,
//! apart from the application's own (sqlx's `_sqlx_migrations` or any other).

use sqlx::{Executor, PgPool};

use crate::sql;

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

/// Every migration, oldest first. A released migration is never edited: add a new one.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "jobs_queue",
        sql: include_str!("../migrations/0001_jobs_queue.sql"),
    },
    Migration {
        version: 2,
        name: "operating",
        sql: include_str!("../migrations/0002_operating.sql"),
    },
    Migration {
        version: 3,
        name: "processed_keys",
        sql: include_str!("../migrations/0003_processed_keys.sql"),
    },
    Migration {
        version: 4,
        name: "schedules",
        sql: include_str!("../migrations/0004_schedules.sql"),
    },
    Migration {
        version: 5,
        name: "outbox",
        sql: include_str!("../migrations/0005_outbox.sql"),
    },
    Migration {
        version: 6,
        name: "claims_and_gauges",
        sql: include_str!("../migrations/0006_claims_and_gauges.sql"),
    },
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
}

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MigrationReport {
    /// Versions applied by this call, oldest first (empty when already up to date).
    pub applied: Vec<i32>,
}

/// Brings the jobs schema up to date, in one transaction, safely from many processes at once.
pub async fn migrate(pool: &PgPool) -> Result<MigrationReport, MigrateError> {
    let mut tx = pool.begin().await?;
    sqlx::query(sql::LOCK_MIGRATIONS)
        .bind(sql::MIGRATION_LOCK_KEY)
        .execute(&mut *tx)
        .await?;
    sqlx::query(sql::CREATE_MIGRATIONS_TABLE)
        .execute(&mut *tx)
        .await?;
    let applied: Vec<(i32, String)> = sqlx::query_as(sql::APPLIED_MIGRATIONS)
        .fetch_all(&mut *tx)
        .await?;
    let known = MIGRATIONS.last().map_or(0, |migration| migration.version);
    if let Some((found, _)) = applied.iter().find(|(version, _)| *version > known) {
        return Err(MigrateError::NewerSchema {
            found: *found,
            known,
        });
    }
    let mut report = MigrationReport::default();
    for migration in MIGRATIONS {
        match applied
            .iter()
            .find(|(version, _)| *version == migration.version)
        {
            Some((_, recorded)) if recorded != migration.name => {
                return Err(MigrateError::Mismatch {
                    version: migration.version,
                    recorded: recorded.clone(),
                    embedded: migration.name,
                });
            }
            Some(_) => continue,
            None => {
                // A plain string runs through the simple protocol, which allows many statements.
                tx.execute(migration.sql).await?;
                sqlx::query(sql::RECORD_MIGRATION)
                    .bind(migration.version)
                    .bind(migration.name)
                    .execute(&mut *tx)
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
