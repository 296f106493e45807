//! Reading a finished job's output, typed: [`output_of`], and `ctx.output_of::<K>(id)` from a
//! running job ([`JobContextExt::output_of`](crate::JobContextExt::output_of)).
//!
//! A job's output is the value its handler returned (`JobResult<T>`), stored as JSON with the
//! job when its run ended `done` (or by [`JobTransaction::complete_with`]), and removed with the
//! row by retention. It is read back as the kind's `Output` type: naming the kind marker
//! (`charge_card::Job`) fixes the type at compile time, and the job's stored kind is checked
//! against it at run time.
//!
//! [`JobTransaction::complete_with`]: crate::JobTransaction::complete_with

use jobs_core::{JobId, JobKind, JobOutput};
use sqlx::PgPool;

use crate::store::outputs;

/// Why [`output_of`] has no output to give.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// No job has this id: never enqueued, or removed (by retention, or discarded).
    #[error("no job {id}: never enqueued, or already removed by retention")]
    NoSuchJob {
        /// The id asked for.
        id: JobId,
    },
    /// The job is of another kind than the one named: its output has another type.
    #[error(
        "job {id} is of kind `{found}`, not `{expected}`: its output is not of the type asked for"
    )]
    OtherKind {
        /// The id asked for.
        id: JobId,
        /// The kind named.
        expected: &'static str,
        /// The job's kind.
        found: String,
    },
    /// The job is not done (yet, or ever): only a done job has an output.
    #[error("job {id} is {state}, not done: only a done job has an output")]
    NotDone {
        /// The id asked for.
        id: JobId,
        /// The job's state (`ready`, `running`, `dead`, `cancelled`, ...).
        state: String,
    },
    /// The stored output does not decode into the kind's output type: the type changed since
    /// the job ran (or the job completed without one, and NULL is no value of the type).
    #[error(
        "the output of job {id} (kind `{kind}`) does not decode into its output type: {message}"
    )]
    Undecodable {
        /// The id asked for.
        id: JobId,
        /// The job's kind.
        kind: &'static str,
        /// The decoder's message.
        message: String,
    },
    /// The context does not come from a worker (a unit test's context, say): there is no
    /// database to read from.
    #[error("this job context does not come from a jobs worker: it has no database to read outputs from")]
    NoWorker,
    /// The database could not be reached or refused the read.
    #[error("could not read the output of job {id}: {source}")]
    Database {
        /// The id asked for.
        id: JobId,
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },
}

/// The output of job `id`, which must be a done job of kind `K` (its marker, such as
/// `charge_card::Job`), decoded as `K::Output`. One statement reads the job's kind, state and
/// output.
///
/// ```ignore
/// let receipt: Receipt = jobs::admin::output_of::<charge_card::Job>(&pool, charge_id).await?;
/// ```
pub async fn output_of<K: JobKind>(pool: &PgPool, id: JobId) -> Result<K::Output, OutputError> {
    let stored = outputs::read_output(pool, id)
        .await
        .map_err(|source| OutputError::Database { id, source })?
        .ok_or(OutputError::NoSuchJob { id })?;
    if stored.kind != K::NAME {
        return Err(OutputError::OtherKind {
            id,
            expected: K::NAME,
            found: stored.kind,
        });
    }
    if stored.state != "done" {
        return Err(OutputError::NotDone {
            id,
            state: stored.state,
        });
    }
    K::Output::decode_output(stored.output.as_deref()).map_err(|error| OutputError::Undecodable {
        id,
        kind: K::NAME,
        message: error.to_string(),
    })
}
