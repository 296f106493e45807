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
//!   lease token, then commits. When the lease was lost (a rescue or another worker took the
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

use jobs_core::{JobContext, JobId};
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use tokio::sync::watch;
use uuid::Uuid;

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
    /// The database failed or refused a statement. When it failed at commit, the commit may or
    /// may not have happened: the job is then either done with its effects, or retried without
    /// them, never one without the other.
    #[error("the job's transaction failed: {0}")]
    Database(#[source] sqlx::Error),
}

/// Opens the job's transaction: implemented for [`JobContext`]; bring it into scope with
/// `use jobs::JobContextExt`.
pub trait JobContextExt {
    /// Begins a transaction on the worker's pool in which the job does its database work and
    /// then completes itself with [`JobTransaction::complete`].
    fn transaction(&self) -> impl Future<Output = Result<JobTransaction, TransactionError>> + Send;
}

impl JobContextExt for JobContext {
    fn transaction(&self) -> impl Future<Output = Result<JobTransaction, TransactionError>> + Send {
        let run = self.backend::<RunLink>();
        async move {
            let run = run.ok_or(TransactionError::NoWorker)?;
            RunLink::begin(run).await
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
    pub async fn complete(mut self) -> Result<(), TransactionError> {
        let mut transaction = self.take();
        let running = self.run.running()?;
        // From here a heartbeat that misses the job most likely raced this completion.
        running.outcome_pending(self.run.id, self.run.token);
        let completed =
            outcomes::complete_in_transaction(&mut transaction, self.run.id, self.run.token)
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
        self.run.note(TransactionUse::Completed);
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
    transaction_use: Mutex<TransactionUse>,
}

impl RunLink {
    /// The link of run `(id, token)` of the worker whose pool, runs and stop-at-once signal
    /// these are.
    pub(crate) fn new(
        pool: PgPool,
        running: Weak<RunningJobs>,
        abandoned: watch::Receiver<bool>,
        id: JobId,
        token: Uuid,
    ) -> Self {
        Self {
            pool,
            running,
            abandoned,
            id,
            token,
            transaction_use: Mutex::new(TransactionUse::None),
        }
    }

    /// What the run's transactions did.
    /// The running job's id.
    pub(crate) fn id(&self) -> JobId {
        self.id
    }

    /// The lease token of this run.
    pub(crate) fn token(&self) -> Uuid {
        self.token
    }

    /// The worker's pool.
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

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
