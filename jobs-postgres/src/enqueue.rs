//! Writing jobs: one at a time or many in one round trip, in the caller's transaction or on
//! their own, with dedupe keys that never abort the caller's transaction.
//!
//! Every job is checked ([`NewJob::check`]) before anything is sent: input PostgreSQL would
//! refuse comes back as [`EnqueueError::Encode`] and leaves the caller's transaction usable.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use jobs_core::{Dependency, EncodeError, IntoDependency, JobId, JobKind, NewJob, Prerequisites};
use sqlx::{PgConnection, PgPool};

use crate::bulk_copy;
use crate::store::dependencies::{self, DependentInsert};
use crate::store::enqueue as store;

/// What enqueueing one job did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// A new job was written with this id.
    New(JobId),
    /// A job with the same dedupe key already exists; this is its id. Nothing was written.
    Duplicate(JobId),
}

impl Enqueued {
    /// The id of the job: the new one, or the existing one holding the dedupe key.
    pub fn id(self) -> JobId {
        match self {
            Enqueued::New(id) | Enqueued::Duplicate(id) => id,
        }
    }

    /// Whether a new job was written.
    pub fn is_new(self) -> bool {
        matches!(self, Enqueued::New(_))
    }
}

impl IntoDependency for Enqueued {
    /// A dependency on the enqueued job (new, or the one already holding the dedupe key),
    /// cancelling the dependent if it fails.
    fn into_dependency(self) -> Dependency {
        Dependency::on_job(self.id())
    }
}

/// Why a job could not be enqueued.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueError {
    /// The job was refused before anything reached the database: its arguments could not be
    /// encoded, or PostgreSQL could not store it or a worker could never decode it (see
    /// [`NewJob::check`]). The caller's transaction is untouched and can go on and commit.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The database refused the write (a lost connection, a statement timeout, a serialization
    /// failure, ...).
    ///
    /// **The caller's transaction is aborted**: PostgreSQL refuses every later statement in it,
    /// and `commit()` on it rolls everything back, the caller's own rows included, although
    /// sqlx reports the commit as `Ok(())`. Treat this error as the failure of the whole
    /// transaction (return it, or roll back and retry the unit of work): never ignore it and
    /// commit.
    #[error("enqueueing failed: {0}")]
    Database(#[from] sqlx::Error),
    /// The job's dedupe key was held by a job that disappeared before its id could be read
    /// (it was pruned or its scope ended at that instant); enqueueing again will succeed.
    #[error(
        "the job holding dedupe key `{key}` of kind `{kind}` vanished while enqueueing; try again"
    )]
    DedupeRace {
        /// The job kind.
        kind: &'static str,
        /// The dedupe key.
        key: String,
    },
    /// Some of the jobs it was to run after do not exist: never enqueued, enqueued in a
    /// transaction not committed yet, or already removed by retention. Nothing was written, and
    /// the caller's transaction is usable.
    #[error("job kind `{kind}` cannot run after jobs {missing:?}: no such jobs (never enqueued, not committed yet, or already removed by retention)")]
    UnknownPrerequisites {
        /// The job kind.
        kind: &'static str,
        /// The ids not found.
        missing: Vec<JobId>,
    },
}

/// A job with per-call options, built by the `builder(..)` function that `#[job]` generates.
///
/// ```ignore
/// send_receipt::builder(1042)
///     .delay(Duration::from_secs(60))
///     .priority(5)
///     .enqueue_in(&mut tx)
///     .await?;
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until `.enqueue_in(..)` or `.enqueue(..)` is awaited"]
pub struct EnqueueBuilder {
    job: Result<NewJob, EncodeError>,
}

impl EnqueueBuilder {
    /// Encodes `args` of kind `K` with the kind's default options.
    pub fn new<K: JobKind>(args: &K::Args) -> Self {
        Self {
            job: NewJob::of::<K>(args),
        }
    }

    fn map(self, change: impl FnOnce(NewJob) -> NewJob) -> Self {
        Self {
            job: self.job.map(change),
        }
    }

    /// Runs no sooner than `delay` after enqueue (by the database clock).
    pub fn delay(self, delay: Duration) -> Self {
        self.map(|job| job.delay(delay))
    }

    /// Runs no sooner than `when`.
    pub fn run_at(self, when: SystemTime) -> Self {
        self.map(|job| job.run_at(when))
    }

    /// Overrides the kind's priority (higher runs first).
    pub fn priority(self, priority: i16) -> Self {
        self.map(|job| job.priority(priority))
    }

    /// Sends the job to another queue than the kind's default.
    pub fn queue(self, queue: impl Into<String>) -> Self {
        self.map(|job| job.queue(queue))
    }

    /// Runs after every job of `prerequisites` has ended (what earlier enqueues returned, or
    /// [`Dependency`] values): until then it is `waiting`, which no worker claims. It becomes
    /// ready in the transaction that ends its last prerequisite, or is cancelled, naming the
    /// prerequisite, when one ends dead or cancelled (unless that dependency says
    /// [`run_on_failure`](Dependency::run_on_failure)). Enqueueing it locks each prerequisite
    /// that has not ended until the caller's transaction ends: keep that transaction short.
    pub fn after(self, prerequisites: impl Prerequisites) -> Self {
        self.map(|job| job.after(prerequisites))
    }

    /// The job as it will be written.
    pub fn into_new_job(self) -> Result<NewJob, EncodeError> {
        self.job
    }

    /// Enqueues on the caller's connection or transaction.
    pub async fn enqueue_in(self, conn: &mut PgConnection) -> Result<Enqueued, EnqueueError> {
        enqueue_job(conn, &self.job?).await
    }

    /// Enqueues on its own, on a connection from `pool`.
    pub async fn enqueue(self, pool: &PgPool) -> Result<Enqueued, EnqueueError> {
        let job = self.job?;
        let mut conn = pool.acquire().await?;
        enqueue_job(&mut conn, &job).await
    }
}

/// Writes one job on `conn`. A dedupe conflict returns [`Enqueued::Duplicate`] without error and
/// without aborting the caller's transaction. A job refused by [`NewJob::check`] returns
/// [`EnqueueError::Encode`] before anything is sent.
pub async fn enqueue_job(conn: &mut PgConnection, job: &NewJob) -> Result<Enqueued, EnqueueError> {
    job.check()?;
    if !job.after.is_empty() {
        return enqueue_dependent(conn, job).await;
    }
    if let Some(id) = store::insert_job(conn, job).await? {
        return Ok(Enqueued::New(id));
    }
    duplicate_of(conn, job).await
}

/// The job holding the dedupe key of `job`, which an insert just found held.
async fn duplicate_of(conn: &mut PgConnection, job: &NewJob) -> Result<Enqueued, EnqueueError> {
    let key = job.dedupe_key.clone().unwrap_or_default();
    let holders = store::find_dedupe_holders(conn, &[(job.kind, key.clone())]).await?;
    match holders.get(&(job.kind.to_string(), key.clone())) {
        Some(id) => Ok(Enqueued::Duplicate(*id)),
        None => Err(EnqueueError::DedupeRace {
            kind: job.kind,
            key,
        }),
    }
}

/// Writes `job`, which has prerequisites: waiting, ready or cancelled by the state of its
/// prerequisites (see [`EnqueueBuilder::after`]).
async fn enqueue_dependent(
    conn: &mut PgConnection,
    job: &NewJob,
) -> Result<Enqueued, EnqueueError> {
    match dependencies::insert_dependent_job(conn, job).await? {
        DependentInsert::Inserted(id, _) => Ok(Enqueued::New(id)),
        DependentInsert::DedupeHeld => duplicate_of(conn, job).await,
        DependentInsert::Missing => {
            let wanted: Vec<JobId> = job.after.iter().map(|dependency| dependency.job).collect();
            Err(EnqueueError::UnknownPrerequisites {
                kind: job.kind,
                missing: dependencies::missing_jobs(conn, &wanted).await?,
            })
        }
    }
}

/// Writes many jobs on `conn` in one round trip (two when some dedupe keys are already held),
/// returning one result per job in input order. Dedupe applies per job, also between jobs of the
/// same call: the first one with a key is written, later ones are its duplicates. When one job is
/// refused by [`NewJob::check`], none is written and the caller's transaction is untouched.
pub async fn enqueue_jobs(
    conn: &mut PgConnection,
    jobs: &[NewJob],
) -> Result<Vec<Enqueued>, EnqueueError> {
    for job in jobs {
        job.check()?;
    }
    enqueue_checked(conn, jobs).await
}

/// [`enqueue_jobs`] of jobs already checked.
async fn enqueue_checked(
    conn: &mut PgConnection,
    jobs: &[NewJob],
) -> Result<Vec<Enqueued>, EnqueueError> {
    if jobs.iter().any(|job| !job.after.is_empty()) {
        return enqueue_with_dependents(conn, jobs).await;
    }
    insert_checked(conn, jobs, None).await
}

/// Writes `jobs`, checked and without prerequisites, in one statement, as members of `batch`
/// when given; one result per job in input order (see [`enqueue_jobs`]).
pub(crate) async fn insert_checked(
    conn: &mut PgConnection,
    jobs: &[NewJob],
    batch: Option<i64>,
) -> Result<Vec<Enqueued>, EnqueueError> {
    match jobs {
        [] => Ok(Vec::new()),
        // The first job too: its keys must be absent for the shared values to be all it has.
        [first, ..] if jobs.iter().all(|job| store::same_shape(first, job)) => {
            let mut ids = store::insert_uniform_jobs(conn, first, jobs, batch).await?;
            if ids.len() != jobs.len() {
                return Err(fewer_rows_than_jobs());
            }
            ids.sort_unstable();
            Ok(ids.into_iter().map(Enqueued::New).collect())
        }
        _ => insert_jobs(conn, jobs, batch).await,
    }
}

/// Writes `jobs`, some with prerequisites, one statement per job, after locking every
/// prerequisite against removal: a missing one refuses the whole call before anything is
/// written.
async fn enqueue_with_dependents(
    conn: &mut PgConnection,
    jobs: &[NewJob],
) -> Result<Vec<Enqueued>, EnqueueError> {
    let mut wanted: Vec<JobId> = jobs
        .iter()
        .flat_map(|job| job.after.iter().map(|dependency| dependency.job))
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    let missing = dependencies::lock_prerequisites(conn, &wanted).await?;
    if let Some(job) = jobs.iter().find(|job| {
        job.after
            .iter()
            .any(|dependency| missing.contains(&dependency.job))
    }) {
        return Err(EnqueueError::UnknownPrerequisites {
            kind: job.kind,
            missing,
        });
    }
    let mut results = Vec::with_capacity(jobs.len());
    for job in jobs {
        results.push(enqueue_job(conn, job).await?);
    }
    Ok(results)
}

/// Writes jobs of any shape, with or without dedupe keys, one array per column, as members of
/// `batch` when given.
async fn insert_jobs(
    conn: &mut PgConnection,
    jobs: &[NewJob],
    batch: Option<i64>,
) -> Result<Vec<Enqueued>, EnqueueError> {
    let mut inserted = store::insert_jobs(conn, jobs, batch).await?;
    inserted.sort_unstable_by_key(|(id, _, _)| *id);

    // Rows without a key were all inserted, with ids growing in input order; rows with a key
    // are matched by (kind, key).
    let mut keyless_ids = Vec::new();
    let mut keyed_ids: HashMap<(String, String), JobId> = HashMap::new();
    for (id, kind, key) in inserted {
        match key {
            Some(key) => {
                keyed_ids.insert((kind, key), id);
            }
            None => keyless_ids.push(id),
        }
    }
    let mut keyless_ids = keyless_ids.into_iter();
    let mut results = Vec::with_capacity(jobs.len());
    let mut pending_keys: Vec<(usize, &'static str, String)> = Vec::new();
    for (position, job) in jobs.iter().enumerate() {
        match &job.dedupe_key {
            None => {
                let id = keyless_ids.next().ok_or_else(fewer_rows_than_jobs)?;
                results.push(Some(Enqueued::New(id)));
            }
            Some(key) => match keyed_ids.remove(&(job.kind.to_string(), key.clone())) {
                Some(id) => results.push(Some(Enqueued::New(id))),
                None => {
                    results.push(None);
                    pending_keys.push((position, job.kind, key.clone()));
                }
            },
        }
    }
    if !pending_keys.is_empty() {
        let wanted: Vec<(&'static str, String)> = pending_keys
            .iter()
            .map(|(_, kind, key)| (*kind, key.clone()))
            .collect();
        let holders = store::find_dedupe_holders(conn, &wanted).await?;
        for (position, kind, key) in pending_keys {
            let id = *holders
                .get(&(kind.to_string(), key.clone()))
                .ok_or(EnqueueError::DedupeRace { kind, key })?;
            results[position] = Some(Enqueued::Duplicate(id));
        }
    }
    Ok(results.into_iter().flatten().collect())
}

/// The error for a bulk insert that returned fewer rows than it was given jobs without keys,
/// which PostgreSQL never does.
fn fewer_rows_than_jobs() -> EnqueueError {
    EnqueueError::Database(sqlx::Error::Protocol(
        "bulk insert returned fewer rows than jobs without dedupe keys".into(),
    ))
}

/// Encodes and writes many jobs of kind `K` on `conn`; used by generated `enqueue_many_in`.
pub async fn enqueue_many_in<K: JobKind>(
    conn: &mut PgConnection,
    args: impl IntoIterator<Item = K::Args>,
) -> Result<Vec<Enqueued>, EnqueueError> {
    let jobs = args
        .into_iter()
        .map(|args| NewJob::of::<K>(&args))
        .collect::<Result<Vec<_>, _>>()?;
    enqueue_jobs(conn, &jobs).await
}

/// Encodes and writes many jobs of kind `K` on their own; used by generated `enqueue_many`.
pub async fn enqueue_many<K: JobKind>(
    pool: &PgPool,
    args: impl IntoIterator<Item = K::Args>,
) -> Result<Vec<Enqueued>, EnqueueError> {
    let jobs = args
        .into_iter()
        .map(|args| NewJob::of::<K>(&args))
        .collect::<Result<Vec<_>, _>>()?;
    enqueue_jobs_on(pool, &jobs).await
}

/// Writes many jobs on their own, as [`enqueue_jobs`] does, but by `COPY` when they are many and
/// alike (see [`bulk_copy::copyable`]), which the database may refuse; then by insert.
async fn enqueue_jobs_on(pool: &PgPool, jobs: &[NewJob]) -> Result<Vec<Enqueued>, EnqueueError> {
    for job in jobs {
        job.check()?;
    }
    if let Some(shape) = bulk_copy::copyable(jobs) {
        if let Some(ids) = bulk_copy::copy_jobs(pool, shape, jobs).await? {
            return Ok(ids.into_iter().map(Enqueued::New).collect());
        }
    }
    let mut conn = pool.acquire().await?;
    enqueue_checked(&mut conn, jobs).await
}
