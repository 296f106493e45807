//! Why an operation on the queue failed.

/// SQLSTATE `undefined_table`: the schema was never migrated.
const UNDEFINED_TABLE: &str = "42P01";

/// Why an operation on the queue failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// The `jobs_queue` table does not exist in this database.
    #[error("the jobs schema is missing in this database: run `jobs migrate` (or `jobs::migrate`) first")]
    SchemaMissing(#[source] sqlx::Error),
    /// The database could not be reached or refused a statement.
    #[error("{0}")]
    Database(#[source] sqlx::Error),
    /// A queue name given to an operation breaks the naming rules; nothing was sent to the
    /// database.
    #[error("invalid queue name: {0}")]
    InvalidQueue(#[from] jobs_core::NameError),
    /// A kind name given to an operation breaks the naming rules; nothing was sent to the
    /// database.
    #[error("invalid kind: {0}")]
    InvalidKind(#[source] jobs_core::NameError),
    /// A cancellation by filter was given no condition, which would cancel every ready job;
    /// nothing was sent to the database. Say so explicitly with `CancelFilter::every_ready_job`.
    #[error("a cancellation by filter needs at least one condition (kind, queue, state or age); to cancel every ready job, ask for all of them explicitly")]
    EmptyFilter,
    /// A text given to an operation cannot be recorded; nothing was sent to the database.
    #[error("invalid {field}: it {problem}")]
    InvalidText {
        /// Which argument.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// A window of time given to an operation is empty or too long; nothing was sent to the
    /// database.
    #[error("invalid window: {0}")]
    InvalidWindow(&'static str),
    /// A search or a page cannot be asked for as given (a page size out of range, a dedupe key
    /// without its kind, a time range that ends before it starts); nothing was sent to the
    /// database.
    #[error("invalid {field}: {problem}")]
    InvalidFilter {
        /// Which argument.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
}

impl From<sqlx::Error> for AdminError {
    fn from(error: sqlx::Error) -> Self {
        let undefined_table = error
            .as_database_error()
            .and_then(|database| database.code())
            .is_some_and(|code| code == UNDEFINED_TABLE);
        if undefined_table {
            AdminError::SchemaMissing(error)
        } else {
            AdminError::Database(error)
        }
    }
}

impl AdminError {
    /// Whether the error is a unique violation: another transaction took a dedupe key.
    pub(crate) fn is_unique_violation(&self) -> bool {
        match self {
            AdminError::Database(error) => error
                .as_database_error()
                .is_some_and(|database| database.is_unique_violation()),
            _ => false,
        }
    }
}

/// What [`refuse_nul`] says of a text holding U+0000.
pub(crate) const HOLDS_NUL: &str = "holds U+0000, which PostgreSQL text cannot store";

/// Refuses a note (who, why) the database cannot store (U+0000) or longer than `max` bytes.
pub(crate) fn check_note(field: &'static str, text: &str, max: usize) -> Result<(), AdminError> {
    refuse_nul(field, text)?;
    if text.len() > max {
        return Err(AdminError::InvalidText {
            field,
            problem: format!("is longer than {max} bytes"),
        });
    }
    Ok(())
}

/// Refuses a text the database cannot store (one holding U+0000) before it is sent.
pub(crate) fn refuse_nul(field: &'static str, text: &str) -> Result<(), AdminError> {
    if text.contains('\0') {
        Err(AdminError::InvalidText {
            field,
            problem: HOLDS_NUL.to_owned(),
        })
    } else {
        Ok(())
    }
}
