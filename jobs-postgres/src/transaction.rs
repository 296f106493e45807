//! Transactional completion: a job does its database work in a transaction opened from its
//! context and completes itself in that same transaction, so that its effects and "done" commit
//! together or not at all.
//!
//! ```ignore
//! use jobs::JobContextExt;
//!
//! #[job]
//! async fn record_receipt(ctx: JobContext, order_id: i64) -> JobResult {
//!     let mut tx = ctx.transaction().await?;
//!     sqlx::query("INSERT INTO receipts (order_id) VALUES ($1)")
//!         .bind(order_id)
//!         .execute(&mut *tx)
//!         .await?;
//!     tx.complete().await?; // the receipt and "done" commit together
//!     Ok(())
//! }
//! ```
//!
//! - [`JobTransaction::complete`] marks the job done inside the transaction, fenced by the run's
//!   lease token, then commits; [`JobTransaction::complete_with`] also stores the job's output
//!   (typed: the kind's `Output`) in the same transaction. Either way, what the handler returns
//!   afterwards is not written: the job's output is the one the transaction stored (none with
//!   `complete`). When the lease was lost (a rescue or another worker took the
//!   job), nothing commits: the effects roll back and the call returns
//!   [`TransactionError::LeaseLost`]. Once it returns `Ok`, the job is done whatever the handler
//!   does next.
//! - A handler that returns an error, panics or times out before completing drops its
//!   transaction: the effects roll back and the job is retried as usual.
//! - A handler that returns `Ok` after dropping its transaction without `complete()` or
//!   `rollback()` is a bug that would lose the effects silently: the job goes dead with an error
//!   saying so. Call [`JobTransaction::rollback`] to discard the effects on purpose.
//!
//! The transaction takes a connection from the worker's pool for as long as it is open: size the
//! pool for the jobs that hold one at once, plus a few connections for the worker itself.

use std::fmt;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use jobs_core::{
    ClassifyError, EncodedOutput, ErrorClass, ErrorClassifier, JobContext, JobId, JobKind,
    JobOutput, OutputEncodeError,
};
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use tokio::sync::watch;
use uuid::Uuid;

use crate::output::{self, OutputError};
use crate::store::outcomes::{self, Fenced};
use crate::worker::running::{Renewal, RunningJobs};

/// Why a job's transaction could not be opened or could not complete the job.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransactionError {
    /// The context does not come from a worker (a unit test's context, say): there is no
    /// database behind it.
    #[error("this job context does not come from a jobs worker: it has no database to open a transaction on")]
    NoWorker,
    /// The worker no longer runs this job: it stopped, or the run is over.
    #[error("the worker no longer runs this job")]
    NotRunning,
    /// Another worker or a rescue took the job: nothing was committed, the effects rolled back.
    #[error(
        "lease lost: another worker or a rescue took the job; the transaction was rolled back"
    )]
    LeaseLost,
    /// The job was already completed by an earlier transaction of this run.
    #[error("the job was already completed by a transaction of this run")]
    AlreadyCompleted,
    /// [`JobTransaction::complete_with`] named a kind other than the running job's: nothing was
    /// committed, the effects rolled back.
    #[error("complete_with::<{named}> called in a job of kind `{running}`: name the running job's kind; the transaction was rolled back")]
    OtherKind {
        /// The kind named.
        named: &'static str,
        /// The running job's kind.
        running: &'static str,
    },
    /// The output given to [`JobTransaction::complete_with`] cannot be stored: nothing was
    /// committed, the effects rolled back. A permanent error: returned with `?`, the job goes
    /// dead with its message.
    #[error("the job's transaction was rolled back: {0}")]
    Output(#[source] OutputEncodeError),
    /// The database failed or refused a statement. When it failed at commit, the commit may or
    /// may not have happened: the job is then either done with its effects, or retried without
    /// them, never one without the other.
    #[error("the job's transaction failed: {0}")]
    Database(#[source] sqlx::Error),
}

// A refused output or a kind misnamed in `complete_with` fails the same way on every attempt:
// permanent. The rest are what they wrap: transient.
impl ClassifyError for TransactionError {
    fn class(&self) -> ErrorClass {
        match self {
            TransactionError::OtherKind { .. } | TransactionError::Output(_) => {
                ErrorClass::Permanent
            }
            _ => ErrorClass::Transient,
        }
    }
}

jobs_core::__private::inventory::submit!(ErrorClassifier::of::<TransactionError>());

/// What a running job does with the worker's database: opens its transaction, reads other
/// jobs' outputs. Implemented for [`JobContext`]; bring it into scope with
/// `use jobs::JobContextExt`.
pub trait JobContextExt {
    /// Begins a transaction on the worker's pool in which the job does its database work and
    /// then completes itself with [`JobTransaction::complete`].
    fn transaction(&self) -> impl Future<Output = Result<JobTransaction, TransactionError>> + Send;

    /// The output of done job `id` of kind `K` (its marker, such as `charge_card::Job`), typed
    /// `K::Output`, read on the worker's pool; see [`output_of`](crate::output::output_of) for
    /// the errors. [`OutputError::NoWorker`] from a context that has no worker behind it.
    ///
    /// ```ignore
    /// let receipt: Receipt = ctx.output_of::<charge_card::Job>(charge_id).await?;
    /// ```
    fn output_of<K: JobKind>(
        &self,
        id: JobId,
    ) -> impl Future<Output = Result<K::Output, OutputError>> + Send;
}

impl JobContextExt for JobContext {
    fn transaction(&self) -> impl Future<Output = Result<JobTransaction, TransactionError>> + Send {
        let run = self.backend::<RunLink>();
        async move {
            let run = run.ok_or(TransactionError::NoWorker)?;
            RunLink::begin(run).await
        }
    }

    fn output_of<K: JobKind>(
        &self,
        id: JobId,
    ) -> impl Future<Output = Result<K::Output, OutputError>> + Send {
        let run = self.backend::<RunLink>();
        async move {
            let run = run.ok_or(OutputError::NoWorker)?;
            output::output_of::<K>(run.pool(), id).await
        }
    }
}

/// A transaction of a running job, for its database work; dereferences to the connection
/// (`.execute(&mut *tx)`). End it with [`complete`](Self::complete) (effects and "done" commit
/// together) or [`rollback`](Self::rollback); dropped without either, it rolls back.
#[must_use = "a job's transaction rolls back unless `complete()` is called"]
pub struct JobTransaction {
    /// Present until the transaction is completed or rolled back.
    transaction: Option<Transaction<'static, Postgres>>,
    run: Arc<RunLink>,
}

impl fmt::Debug for JobTransaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobTransaction")
            .field("job", &self.run.id)
            .field("open", &self.transaction.is_some())
            .finish()
    }
}

impl JobTransaction {
    /// Marks the job done in this transaction, fenced by the run's lease token, and commits:
    /// the effects and the completion are durable together. With the lease lost, rolls back and
    /// returns [`TransactionError::LeaseLost`]; return the error (`?`), the run is over.
    pub async fn complete(self) -> Result<(), TransactionError> {
        self.complete_storing(None).await
    }

    /// Marks the job done in this transaction storing `output` as its output, fenced by the
    /// run's lease token, and commits, as [`complete`](Self::complete) does. `K` is the running
    /// job's kind marker (`charge_card::Job`), which types the output; naming another kind
    /// is refused ([`TransactionError::OtherKind`]).
    ///
    /// The output is the job's from then on: what the handler returns afterwards is not written
    /// again. An output that cannot be stored (over
    /// [`MAX_OUTPUT_BYTES`](jobs_core::MAX_OUTPUT_BYTES), or failing to serialize) rolls the
    /// transaction back and returns [`TransactionError::Output`], a permanent error: returned
    /// with `?`, the job goes dead with its message.
    ///
    /// ```ignore
    /// #[job]
    /// async fn charge_card(ctx: JobContext, order_id: i64) -> JobResult<Receipt> {
    ///     let mut tx = ctx.transaction().await?;
    ///     let receipt = record_charge(&mut tx, order_id).await?;
    ///     tx.complete_with::<charge_card::Job>(&receipt).await?;
    ///     Ok(receipt)
    /// }
    /// ```
    pub fn complete_with<K: JobKind>(
        self,
        output: &K::Output,
    ) -> impl Future<Output = Result<(), TransactionError>> + Send {
        // Checked and encoded before anything is awaited: the future holds the JSON, not a
        // borrow of the output.
        let encoded = if K::NAME == self.run.kind {
            output.encode_output().map_err(TransactionError::Output)
        } else {
            Err(TransactionError::OtherKind {
                named: K::NAME,
                running: self.run.kind,
            })
        };
        async move {
            match encoded {
                Ok(encoded) => self.complete_storing(encoded).await,
                Err(refusal) => {
                    let _ = self.rollback().await;
                    Err(refusal)
                }
            }
        }
    }

    async fn complete_storing(
        mut self,
        output: Option<EncodedOutput>,
    ) -> Result<(), TransactionError> {
        let mut transaction = self.take();
        let running = self.run.running()?;
        // From here a heartbeat that misses the job most likely raced this completion.
        // Completed in its own transaction: no outcome for the completer to write.
        running.outcome_pending(self.run.id, self.run.token, false);
        let completed = outcomes::complete_in_transaction(
            &mut transaction,
            self.run.id,
            self.run.token,
            output.as_ref(),
        )
        .await
        .map_err(TransactionError::Database)?;
        if completed == Fenced::LeaseLost {
            let _ = transaction.rollback().await;
            running.mark_lost(self.run.id, self.run.token);
            tracing::warn!(
                job.id = self.run.id,
                "lease lost before the job's transaction completed it: another worker or a rescue took the job; its effects are rolled back"
            );
            return Err(TransactionError::LeaseLost);
        }
        transaction
            .commit()
            .await
            .map_err(TransactionError::Database)?;
        self.run.completed(output);
        Ok(())
    }

    /// Rolls the transaction back on purpose: its effects are discarded, and the job's outcome
    /// is what the handler returns.
    pub async fn rollback(mut self) -> Result<(), TransactionError> {
        self.take()
            .rollback()
            .await
            .map_err(TransactionError::Database)
    }

    fn take(&mut self) -> Transaction<'static, Postgres> {
        self.transaction
            .take()
            .expect("a job transaction is open until complete() or rollback() consumes it")
    }

    fn open(&self) -> &Transaction<'static, Postgres> {
        self.transaction
            .as_ref()
            .expect("a job transaction is open until complete() or rollback() consumes it")
    }
}

impl Deref for JobTransaction {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        self.open()
    }
}

impl DerefMut for JobTransaction {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.transaction
            .as_mut()
            .expect("a job transaction is open until complete() or rollback() consumes it")
    }
}

impl Drop for JobTransaction {
    fn drop(&mut self) {
        if self.transaction.is_some() {
            // sqlx rolls the transaction back when the connection goes back to the pool.
            self.run.note(TransactionUse::DroppedOpen);
        }
    }
}

/// What a run did with its transactions, as the executor reads it when the run is over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum TransactionUse {
    /// No transaction completed the job, and none was dropped open.
    #[default]
    None,
    /// A transaction completed the job: it is done, and there is no outcome left to write.
    Completed,
    /// A transaction was dropped without `complete()` or `rollback()`: its effects rolled back.
    DroppedOpen,
}

/// The worker's link to one run, attached to its context: what the run's transactions need
/// (the pool, the worker's record of the runs it holds, the lease token) and what they tell the
/// executor.
#[derive(Debug)]
pub(crate) struct RunLink {
    pool: PgPool,
    /// The worker's runs, held weakly: once the worker is gone, the run is not running.
    running: Weak<RunningJobs>,
    /// Turns true when the worker stops at once, abandoning its runs.
    abandoned: watch::Receiver<bool>,
    id: JobId,
    token: Uuid,
    kind: &'static str,
    transaction_use: Mutex<TransactionUse>,
    /// The output a transaction stored when it completed the job.
    completed_output: Mutex<Option<EncodedOutput>>,
}

impl RunLink {
    /// The link of run `(id, token)` of a job of kind `kind`, of the worker whose pool, runs
    /// and stop-at-once signal these are.
    pub(crate) fn new(
        pool: PgPool,
        running: Weak<RunningJobs>,
        abandoned: watch::Receiver<bool>,
        (id, token): (JobId, Uuid),
        kind: &'static str,
    ) -> Self {
        Self {
            pool,
            running,
            abandoned,
            id,
            token,
            kind,
            transaction_use: Mutex::new(TransactionUse::None),
            completed_output: Mutex::new(None),
        }
    }

    /// The output the transaction that completed the job stored, if any.
    pub(crate) fn completed_output(&self) -> Option<EncodedOutput> {
        self.completed_output
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records that a transaction completed the job, storing `output`.
    fn completed(&self, output: Option<EncodedOutput>) {
        *self
            .completed_output
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = output;
        self.note(TransactionUse::Completed);
    }

    /// The running job's id.
    pub(crate) fn id(&self) -> JobId {
        self.id
    }

    /// The lease token of this run.
    pub(crate) fn token(&self) -> Uuid {
        self.token
    }

    /// The pool of the worker running the job, to read other jobs' outputs and batches.
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// What the run's transactions did.
    pub(crate) fn transaction_use(&self) -> TransactionUse {
        *self
            .transaction_use
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Records what a transaction did; a completion is never overwritten.
    fn note(&self, what: TransactionUse) {
        let mut used = self
            .transaction_use
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *used != TransactionUse::Completed {
            *used = what;
        }
    }

    /// The worker's runs, while the worker is there.
    fn running(&self) -> Result<Arc<RunningJobs>, TransactionError> {
        self.running.upgrade().ok_or(TransactionError::NotRunning)
    }

    async fn begin(run: Arc<RunLink>) -> Result<JobTransaction, TransactionError> {
        let running = run.running()?;
        if run.transaction_use() == TransactionUse::Completed {
            return Err(TransactionError::AlreadyCompleted);
        }
        if *run.abandoned.borrow() {
            return Err(TransactionError::NotRunning);
        }
        match running.state_of(run.id, run.token) {
            Renewal::Renewed => {}
            Renewal::Lost => return Err(TransactionError::LeaseLost),
            Renewal::Unknown => return Err(TransactionError::NotRunning),
        }
        let transaction = run.pool.begin().await.map_err(TransactionError::Database)?;
        Ok(JobTransaction {
            transaction: Some(transaction),
            run,
        })
    }
}
