//! Jobs that run after others: chains, diamonds, failing prerequisites, replays, cancels, and
//! the enqueue's own refusals, against a real PostgreSQL and real workers.

use jobs::admin::{self, CancelNote, DeadFilter};
use jobs::{job, Dependency, EnqueueError, JobContext, JobId, JobResult, State};
use sqlx::PgPool;

use crate::support::{wait_until, Db};
use crate::test_jobs::record_run;

/// Records its run, then fails permanently unless the `allowed` table holds its id.
#[job(max_attempts = 1)]
pub async fn fails_until_allowed(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    sqlx::query("INSERT INTO runs (job_id, attempt) VALUES ($1, $2)")
        .bind(ctx.id())
        .bind(1_i32)
        .execute(&*pool)
        .await?;
    let allowed: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM allowed WHERE job_id = $1)")
            .bind(ctx.id())
            .fetch_one(&*pool)
            .await?;
    if allowed {
        Ok(())
    } else {
        Err(jobs::JobError::permanent("not allowed yet"))
    }
}

/// A charge, whose output its dependents read.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Charge {
    pub order_id: i64,
    pub amount_cents: i64,
    pub reference: String,
}

/// Charges an order and returns the charge.
#[job]
pub async fn charge_order(order_id: i64) -> JobResult<Charge> {
    Ok(Charge {
        order_id,
        amount_cents: 4_200,
        reference: format!("ch_{order_id}"),
    })
}

/// Reads the charge it ran after, typed, and records it in `receipts`.
#[job]
pub async fn receipt_for_charge(
    ctx: JobContext,
    pool: State<PgPool>,
    charge_id: JobId,
) -> JobResult<String> {
    use jobs::JobContextExt;
    let charge: Charge = ctx
        .output_of::<charge_order::Job>(charge_id)
        .await
        .map_err(jobs::JobError::permanent)?;
    sqlx::query("INSERT INTO receipts (order_id, amount_cents, reference) VALUES ($1, $2, $3)")
        .bind(charge.order_id)
        .bind(charge.amount_cents)
        .bind(&charge.reference)
        .execute(&*pool)
        .await?;
    Ok(format!("receipt for {}", charge.reference))
}

const KINDS: [&str; 4] = [
    "record_run",
    "fails_until_allowed",
    "charge_order",
    "receipt_for_charge",
];

async fn db() -> Db {
    let db = Db::new().await;
    db.execute("CREATE TABLE allowed (job_id bigint PRIMARY KEY)")
        .await;
    db
}

/// When job `id` first ran, as recorded in `runs`.
async fn ran_at(db: &Db, id: JobId) -> chrono::DateTime<chrono::Utc> {
    sqlx::query_scalar("SELECT min(ran_at) FROM runs WHERE job_id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

async fn finished_at(db: &Db, id: JobId) -> chrono::DateTime<chrono::Utc> {
    db.job_value(id, "finished_at").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_three_runs_in_order() {
    let db = db().await;
    let mut tx = db.pool.begin().await.unwrap();
    let first = record_run::builder("first".into())
        .enqueue_in(&mut tx)
        .await
        .unwrap();
    let second = record_run::builder("second".into())
        .after([first])
        .enqueue_in(&mut tx)
        .await
        .unwrap();
    let third = record_run::builder("third".into())
        .after([second])
        .enqueue_in(&mut tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(db.job(second.id()).await.state, "waiting");
    assert_eq!(db.job(third.id()).await.state, "waiting");

    db.run_until(&KINDS, third.id(), "done").await;
    assert!(ran_at(&db, second.id()).await >= finished_at(&db, first.id()).await);
    assert!(ran_at(&db, third.id()).await >= finished_at(&db, second.id()).await);
    for job in [first, second, third] {
        assert_eq!(db.runs_of(job.id()).await, 1);
    }
    let left: Option<i32> = db.job_value(third.id(), "prerequisites_left").await;
    assert_eq!(left, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependent_reads_its_prerequisites_output_typed() {
    let db = db().await;
    db.execute("CREATE TABLE receipts (order_id bigint, amount_cents bigint, reference text)")
        .await;
    let mut tx = db.pool.begin().await.unwrap();
    let charge = charge_order::enqueue_in(&mut tx, 1042).await.unwrap();
    let receipt = receipt_for_charge::builder(charge.id())
        .after([charge])
        .enqueue_in(&mut tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    db.run_until(&KINDS, receipt.id(), "done").await;
    let receipts: Vec<(i64, i64, String)> = db
        .rows("SELECT order_id, amount_cents, reference FROM receipts")
        .await;
    assert_eq!(receipts, [(1042, 4_200, String::from("ch_1042"))]);
    let said = jobs::admin::output_of::<receipt_for_charge::Job>(&db.pool, receipt.id())
        .await
        .unwrap();
    assert_eq!(said, "receipt for ch_1042");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diamond_joins_after_both_branches() {
    let db = db().await;
    let mut tx = db.pool.begin().await.unwrap();
    let top = record_run::builder("top".into())
        .enqueue_in(&mut tx)
        .await
        .unwrap();
    let left = record_run::builder("left".into())
        .after([top])
        .enqueue_in(&mut tx)
        .await
        .unwrap();
    let right = record_run::builder("right".into())
        .after([top])
        .enqueue_in(&mut tx)
        .await
        .unwrap();
    let join = record_run::builder("join".into())
        .after([left, right])
        .enqueue_in(&mut tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    db.run_until(&KINDS, join.id(), "done").await;
    let joined = ran_at(&db, join.id()).await;
    assert!(joined >= finished_at(&db, left.id()).await);
    assert!(joined >= finished_at(&db, right.id()).await);
    assert_eq!(db.runs_of(join.id()).await, 1, "the join runs once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_prerequisite_cancels_its_dependents_unless_they_run_on_failure() {
    let db = db().await;
    let mut tx = db.pool.begin().await.unwrap();
    let doomed = fails_until_allowed::enqueue_in(&mut tx).await.unwrap();
    let cancelled = record_run::builder("cancelled".into())
        .after([doomed])
        .enqueue_in(&mut tx)
        .await
        .unwrap();
    // Cancelling a dependent cancels its own dependents in turn.
    let downstream = record_run::builder("downstream".into())
        .after([cancelled])
        .enqueue_in(&mut tx)
        .await
        .unwrap();
    let runs_anyway = record_run::builder("runs anyway".into())
        .after([Dependency::on(doomed).run_on_failure()])
        .enqueue_in(&mut tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    db.run_until(&KINDS, runs_anyway.id(), "done").await;
    assert_eq!(db.job(doomed.id()).await.state, "dead");
    let row = db.job(cancelled.id()).await;
    assert_eq!(row.state, "cancelled");
    let reason: String = db.job_value(cancelled.id(), "cancel_reason").await;
    assert_eq!(
        reason,
        format!("prerequisite job {} ended dead", doomed.id())
    );
    assert_eq!(row.errors.0.len(), 1, "the reason is in the history too");
    assert_eq!(row.errors.0[0].kind, "cancelled");
    let reason: String = db.job_value(downstream.id(), "cancel_reason").await;
    assert_eq!(
        reason,
        format!("prerequisite job {} ended cancelled", cancelled.id())
    );
    assert_eq!(db.runs_of(cancelled.id()).await, 0);
    assert_eq!(db.runs_of(downstream.id()).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_a_dead_prerequisite_reopens_what_it_cancelled() {
    let db = db().await;
    let mut tx = db.pool.begin().await.unwrap();
    let doomed = fails_until_allowed::enqueue_in(&mut tx).await.unwrap();
    let dependent = record_run::builder("dependent".into())
        .after([doomed])
        .enqueue_in(&mut tx)
        .await
        .unwrap();
    let downstream = record_run::builder("downstream".into())
        .after([dependent])
        .enqueue_in(&mut tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    db.run_until(&KINDS, downstream.id(), "cancelled").await;

    sqlx::query("INSERT INTO allowed (job_id) VALUES ($1)")
        .bind(doomed.id())
        .execute(&db.pool)
        .await
        .unwrap();
    let report = admin::replay(&db.pool, &DeadFilter::all().ids([doomed.id()]))
        .await
        .unwrap();
    assert_eq!(report.replayed.len(), 1);
    assert_eq!(db.job(dependent.id()).await.state, "waiting");
    assert_eq!(db.job(downstream.id()).await.state, "waiting");
    let reason: Option<String> = db.job_value(dependent.id(), "cancel_reason").await;
    assert_eq!(reason, None);

    db.run_until(&KINDS, downstream.id(), "done").await;
    assert_eq!(db.job(dependent.id()).await.state, "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_keeps_a_dependent_cancelled_while_another_prerequisite_failed() {
    let db = db().await;
    let mut tx = db.pool.begin().await.unwrap();
    let first = fails_until_allowed::enqueue_in(&mut tx).await.unwrap();
    let second = fails_until_allowed::enqueue_in(&mut tx).await.unwrap();
    let dependent = record_run::builder("dependent".into())
        .after([first, second])
        .enqueue_in(&mut tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let worker = db.start_worker(&KINDS);
    db.wait_for_state(first.id(), "dead").await;
    db.wait_for_state(second.id(), "dead").await;
    worker.shutdown().await.unwrap();
    assert_eq!(db.job(dependent.id()).await.state, "cancelled");

    let named: i64 = db
        .job_value(dependent.id(), "cancelled_by_prerequisite")
        .await;
    let other = if named == first.id() { second } else { first };
    admin::replay(&db.pool, &DeadFilter::all().ids([named]))
        .await
        .unwrap();
    assert_eq!(db.job(dependent.id()).await.state, "cancelled");
    let now_named: i64 = db
        .job_value(dependent.id(), "cancelled_by_prerequisite")
        .await;
    assert_eq!(now_named, other.id());
    let reason: String = db.job_value(dependent.id(), "cancel_reason").await;
    assert_eq!(
        reason,
        format!("prerequisite job {} ended dead", other.id())
    );
}

#[tokio::test]
async fn a_prerequisite_already_ended_is_counted_at_enqueue() {
    let db = db().await;
    let done = record_run::builder("done".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    let dead = fails_until_allowed::enqueue(&db.pool).await.unwrap();
    db.run_until_each(&KINDS, [(done.id(), "done"), (dead.id(), "dead")])
        .await;

    let ready = record_run::builder("after done".into())
        .after([done])
        .enqueue(&db.pool)
        .await
        .unwrap();
    assert_eq!(db.job(ready.id()).await.state, "ready");
    let cancelled = record_run::builder("after dead".into())
        .after([done, dead])
        .enqueue(&db.pool)
        .await
        .unwrap();
    assert_eq!(db.job(cancelled.id()).await.state, "cancelled");
    let reason: String = db.job_value(cancelled.id(), "cancel_reason").await;
    assert_eq!(reason, format!("prerequisite job {} ended dead", dead.id()));
    let runs_anyway = record_run::builder("runs anyway".into())
        .after([Dependency::on(dead).run_on_failure()])
        .enqueue(&db.pool)
        .await
        .unwrap();
    assert_eq!(db.job(runs_anyway.id()).await.state, "ready");
}

#[tokio::test]
async fn an_unknown_prerequisite_is_refused_and_the_transaction_stays_usable() {
    let db = db().await;
    let known = record_run::builder("known".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("INSERT INTO allowed (job_id) VALUES (42)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let error = record_run::builder("orphan".into())
        .after([Dependency::on(known), Dependency::on_job(999_999)])
        .enqueue_in(&mut tx)
        .await
        .unwrap_err();
    match &error {
        EnqueueError::UnknownPrerequisites { kind, missing } => {
            assert_eq!(*kind, "record_run");
            assert_eq!(missing, &[999_999]);
        }
        other => panic!("expected UnknownPrerequisites, got {other:?}"),
    }
    assert!(error.to_string().contains("999999"), "{error}");
    // Bulk: one missing prerequisite refuses the whole call, before anything is written.
    let jobs = [
        record_run::builder("fine".into()).into_new_job().unwrap(),
        record_run::builder("orphan".into())
            .after([Dependency::on_job(888_888)])
            .into_new_job()
            .unwrap(),
    ];
    let error = jobs::enqueue_jobs(&mut tx, &jobs).await.unwrap_err();
    assert!(matches!(error, EnqueueError::UnknownPrerequisites { .. }));
    tx.commit().await.unwrap();
    assert_eq!(db.count("SELECT count(*) FROM allowed").await, 1);
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue").await, 1);
    assert_eq!(db.count("SELECT count(*) FROM jobs_dependencies").await, 0);
}

#[tokio::test]
async fn a_rolled_back_enqueue_leaves_nothing() {
    let db = db().await;
    let before = record_run::builder("committed".into())
        .enqueue(&db.pool)
        .await
        .unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let first = record_run::builder("first".into())
        .enqueue_in(&mut tx)
        .await
        .unwrap();
    record_run::builder("second".into())
        .after([first, before])
        .enqueue_in(&mut tx)
        .await
        .unwrap();
    jobs::Batch::new()
        .then(record_run::builder("callback".into()))
        .enqueue_in(
            &mut tx,
            (0..10).map(|n| record_run::builder(format!("member {n}"))),
        )
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue").await, 1);
    for table in ["jobs_dependencies", "jobs_batches", "jobs_batch_chunks"] {
        assert_eq!(
            db.count(&format!("SELECT count(*) FROM {table}")).await,
            0,
            "{table}"
        );
    }
}

#[tokio::test]
async fn cancelling_a_waiting_job_cancels_its_dependents() {
    let db = db().await;
    let first = record_run::builder("first".into())
        .delay(std::time::Duration::from_secs(3_600))
        .enqueue(&db.pool)
        .await
        .unwrap();
    let waiting = record_run::builder("waiting".into())
        .after([first])
        .enqueue(&db.pool)
        .await
        .unwrap();
    let downstream = record_run::builder("downstream".into())
        .after([waiting])
        .enqueue(&db.pool)
        .await
        .unwrap();
    let report = admin::cancel(&db.pool, &[waiting.id()], &CancelNote::by("ops"))
        .await
        .unwrap();
    assert_eq!(report.cancelled.len(), 1, "{report:?}");
    assert_eq!(db.job(waiting.id()).await.state, "cancelled");
    assert_eq!(db.job(downstream.id()).await.state, "cancelled");
    // The operator's cancel is not undone by anything its prerequisite does.
    assert_eq!(db.job(first.id()).await.state, "ready");
}

/// Prerequisites ending while their dependents are being enqueued: each dependent either sees
/// its prerequisite ended or is seen by it, never neither (which would leave it waiting
/// forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dependents_enqueued_while_their_prerequisites_end_are_never_left_waiting() {
    let db = db().await;
    const PAIRS: usize = 300;
    let worker = db.start_worker(&KINDS);
    let mut dependents = Vec::with_capacity(PAIRS);
    for n in 0..PAIRS {
        let prerequisite = record_run::enqueue(&db.pool, format!("prerequisite {n}"))
            .await
            .unwrap();
        // The worker is claiming and ending the prerequisite meanwhile.
        let dependent = record_run::builder(format!("dependent {n}"))
            .after([prerequisite])
            .enqueue(&db.pool)
            .await
            .unwrap();
        dependents.push(dependent.id());
    }
    wait_until("every dependent to be done", || async {
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'done'")
            .await
            == i64::try_from(2 * PAIRS).unwrap()
    })
    .await;
    worker.shutdown().await.unwrap();
}
