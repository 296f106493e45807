//! Batches: a callback that runs once after every member has ended, with the right counts;
//! members adding members; replays; operator cancels; refusals that write nothing.

use jobs::admin::{self, CancelNote, DeadFilter};
use jobs::{job, Batch, BatchError, Dependency, JobContext, JobId, JobResult, State};
use sqlx::PgPool;

use crate::dependencies::fails_until_allowed;
use crate::support::{wait_until, Db};
use crate::test_jobs::record_run;

/// A batch's callback: records what it read of its batch in `outcomes`.
#[job]
pub async fn record_outcome(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    let outcome = Batch::outcome(&ctx)
        .await
        .map_err(jobs::JobError::transient)?;
    let failed: Vec<JobId> = outcome.failed.iter().map(|(id, _)| *id).collect();
    sqlx::query(
        "INSERT INTO outcomes (job_id, batch_id, pending, done, dead, cancelled, failed)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(ctx.id())
    .bind(outcome.id)
    .bind(i64::try_from(outcome.pending).unwrap())
    .bind(i64::try_from(outcome.done).unwrap())
    .bind(i64::try_from(outcome.dead).unwrap())
    .bind(i64::try_from(outcome.cancelled).unwrap())
    .bind(&failed)
    .execute(&*pool)
    .await?;
    Ok(())
}

/// A chunk of an import that discovers more: below depth 2, adds three chunks one level deeper
/// to its own batch, in the job's own transaction, before completing.
#[job]
pub async fn import_chunk(ctx: JobContext, pool: State<PgPool>, depth: u32) -> JobResult {
    use jobs::JobContextExt;
    sqlx::query("INSERT INTO runs (job_id, attempt) VALUES ($1, 1)")
        .bind(ctx.id())
        .execute(&*pool)
        .await?;
    let mut tx = ctx.transaction().await.map_err(jobs::JobError::transient)?;
    if depth < 2 {
        Batch::add_in(
            &ctx,
            &mut tx,
            (0..3).map(|_| import_chunk::builder(depth + 1)),
        )
        .await
        .map_err(jobs::JobError::transient)?;
    }
    tx.complete().await.map_err(jobs::JobError::transient)?;
    Ok(())
}

/// Tries to add a member to its batch, and records what happened in `additions`.
#[job]
pub async fn tries_to_add(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    let mut conn = pool.acquire().await?;
    let result = Batch::add_in(&ctx, &mut conn, [record_run::builder("added".into())]).await;
    let outcome = match result {
        Ok(_) => String::from("added"),
        Err(error) => error.to_string(),
    };
    sqlx::query("INSERT INTO additions (job_id, outcome) VALUES ($1, $2)")
        .bind(ctx.id())
        .bind(outcome)
        .execute(&*pool)
        .await?;
    Ok(())
}

const KINDS: [&str; 5] = [
    "record_run",
    "fails_until_allowed",
    "record_outcome",
    "import_chunk",
    "tries_to_add",
];

async fn db() -> Db {
    let db = Db::new().await;
    db.execute("CREATE TABLE allowed (job_id bigint PRIMARY KEY)")
        .await;
    db.execute(
        "CREATE TABLE outcomes (job_id bigint, batch_id bigint, pending bigint, done bigint,
                                dead bigint, cancelled bigint, failed bigint[],
                                at timestamptz NOT NULL DEFAULT clock_timestamp())",
    )
    .await;
    db.execute("CREATE TABLE additions (job_id bigint, outcome text)")
        .await;
    db
}

/// What the callbacks recorded, oldest first: (pending, done, dead, cancelled, failed).
async fn outcomes(db: &Db) -> Vec<(i64, i64, i64, i64, Vec<JobId>)> {
    db.rows("SELECT pending, done, dead, cancelled, failed FROM outcomes ORDER BY at")
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_a_thousand_runs_its_callback_once_with_the_counts() {
    let db = db().await;
    let members = (0..1_000).map(|n| {
        if n % 100 == 7 {
            fails_until_allowed::builder()
        } else {
            record_run::builder(format!("member {n}"))
        }
    });
    let batch = Batch::new()
        .then(record_outcome::builder())
        .enqueue(&db.pool, members)
        .await
        .unwrap();
    assert_eq!(batch.members.len(), 1_000);
    let callback = batch.callback.unwrap();
    assert_eq!(db.job(callback).await.state, "waiting");

    let worker = db.start_worker(&KINDS);
    db.wait_for_state(callback, "done").await;
    worker.shutdown().await.unwrap();

    let mut failed: Vec<JobId> = (0..1_000)
        .filter(|n| n % 100 == 7)
        .map(|n| batch.members[n].id())
        .collect();
    failed.sort_unstable();
    assert_eq!(outcomes(&db).await, [(0, 990, 10, 0, failed)]);
    assert_eq!(db.runs_of(callback).await, 0, "the callback records no run");
    let last_member_end: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT max(finished_at) FROM jobs_queue WHERE batch_id = $1")
            .bind(batch.id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let callback_ran: chrono::DateTime<chrono::Utc> = db.job_value(callback, "attempted_at").await;
    assert!(callback_ran >= last_member_end, "after the last member");
    let ended = admin_outcome(&db, batch.id).await;
    assert!(ended.ended_at.is_some());
    assert_eq!((ended.done, ended.dead, ended.members()), (990, 10, 1_000));
}

async fn admin_outcome(db: &Db, batch: i64) -> jobs::BatchOutcome {
    jobs::postgres::batch::batch_outcome_by_id(&db.pool, batch)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_add_members_and_the_callback_waits_for_all_of_them() {
    let db = db().await;
    let batch = Batch::new()
        .then(record_outcome::builder())
        .enqueue(&db.pool, (0..2).map(|_| import_chunk::builder(0)))
        .await
        .unwrap();
    let callback = batch.callback.unwrap();
    db.run_until(&KINDS, callback, "done").await;
    // 2 at depth 0, 6 at depth 1, 18 at depth 2.
    assert_eq!(outcomes(&db).await, [(0, 26, 0, 0, vec![])]);
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) FROM jobs_queue WHERE batch_id = {} AND state = 'done'",
            batch.id
        ))
        .await,
        26
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_batch_runs_its_callback_at_once() {
    let db = db().await;
    let batch = Batch::new()
        .then(record_outcome::builder())
        .enqueue(&db.pool, std::iter::empty())
        .await
        .unwrap();
    let callback = batch.callback.unwrap();
    assert_eq!(db.job(callback).await.state, "ready");
    db.run_until(&KINDS, callback, "done").await;
    assert_eq!(outcomes(&db).await, [(0, 0, 0, 0, vec![])]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_a_dead_member_runs_the_callback_again_with_the_new_counts() {
    let db = db().await;
    let batch = Batch::new()
        .then(record_outcome::builder())
        .enqueue(
            &db.pool,
            [
                record_run::builder("a".into()),
                fails_until_allowed::builder(),
                record_run::builder("b".into()),
            ],
        )
        .await
        .unwrap();
    let callback = batch.callback.unwrap();
    let doomed = batch.members[1].id();
    db.run_until(&KINDS, callback, "done").await;
    assert_eq!(outcomes(&db).await, [(0, 2, 1, 0, vec![doomed])]);

    sqlx::query("INSERT INTO allowed (job_id) VALUES ($1)")
        .bind(doomed)
        .execute(&db.pool)
        .await
        .unwrap();
    admin::replay(&db.pool, &DeadFilter::all().ids([doomed]))
        .await
        .unwrap();
    assert!(
        admin_outcome(&db, batch.id).await.ended_at.is_none(),
        "re-opened"
    );
    let worker = db.start_worker(&KINDS);
    wait_until("the callback to run again", || async {
        db.count("SELECT count(*) FROM outcomes").await == 2
    })
    .await;
    db.wait_for_state(callback, "done").await;
    worker.shutdown().await.unwrap();
    assert_eq!(
        outcomes(&db).await,
        [(0, 2, 1, 0, vec![doomed]), (0, 3, 0, 0, vec![])]
    );
}

/// A batch of four `record_run` members with a `record_outcome` callback.
async fn four_members_and_a_callback(db: &Db) -> jobs::EnqueuedBatch {
    Batch::new()
        .then(record_outcome::builder())
        .enqueue(
            &db.pool,
            (0..4).map(|n| record_run::builder(format!("member {n}"))),
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_cancelled_by_an_operator_count_as_cancelled() {
    let db = db().await;
    let batch = four_members_and_a_callback(&db).await;
    let cancelled = [batch.members[0].id(), batch.members[3].id()];
    admin::cancel(&db.pool, &cancelled, &CancelNote::by("ops"))
        .await
        .unwrap();
    db.run_until(&KINDS, batch.callback.unwrap(), "done").await;
    assert_eq!(outcomes(&db).await, [(0, 2, 0, 2, cancelled.to_vec())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_running_member_may_add_to_its_batch() {
    let db = db().await;
    let outsider = tries_to_add::enqueue(&db.pool).await.unwrap().id();
    db.run_until(&KINDS, outsider, "done").await;
    let recorded: Vec<String> = db.column("SELECT outcome FROM additions").await;
    assert_eq!(
        recorded,
        [format!(
            "job {outsider} is not a member of a batch: only a batch's members may add to it"
        )]
    );

    let batch = Batch::new()
        .enqueue(&db.pool, [tries_to_add::builder()])
        .await
        .unwrap();
    let member = batch.members[0].id();
    db.run_until(&KINDS, member, "done").await;
    let recorded: Vec<String> = db
        .column(&format!(
            "SELECT outcome FROM additions WHERE job_id = {member}"
        ))
        .await;
    assert_eq!(recorded, ["added"]);
    let outcome = admin_outcome(&db, batch.id).await;
    assert_eq!(outcome.members(), 2, "{outcome:?}");
}

#[tokio::test]
async fn refused_batches_write_nothing_and_leave_the_transaction_usable() {
    let db = db().await;
    let prerequisite = record_run::enqueue(&db.pool, "p".into()).await.unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("INSERT INTO allowed (job_id) VALUES (1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let error = Batch::new()
        .enqueue_in(
            &mut tx,
            [
                record_run::builder("fine".into()),
                record_run::builder("late".into()).after([Dependency::on(prerequisite)]),
            ],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error, BatchError::HasPrerequisites { kind: "record_run" }),
        "{error:?}"
    );
    let error = Batch::new()
        .then(record_run::builder("x".into()).queue("bad queue name"))
        .enqueue_in(&mut tx, [record_run::builder("fine".into())])
        .await
        .unwrap_err();
    assert!(matches!(error, BatchError::Enqueue(_)), "{error:?}");
    tx.commit().await.unwrap();
    assert_eq!(db.count("SELECT count(*) FROM allowed").await, 1);
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue").await, 1);
    assert_eq!(db.count("SELECT count(*) FROM jobs_batches").await, 0);
}
