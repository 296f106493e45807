//! Cancelling jobs: ready ones (due or scheduled) at once, by id, by kind and dedupe key, or by
//! filter in batches; running ones by a request their run observes, ending cancelled unless the
//! run succeeds; never both run and cancelled when a cancel races the claims; a rescued job
//! with a request is cancelled, not run again. And the plans of the new statements on a million
//! retained rows.

use std::collections::HashSet;
use std::time::Duration;

use jobs::admin::{
    self, AdminError, CancelFilter, CancelNote, JobState, NotCancellable, ReadyState,
    MAX_CANCEL_NOTE_LEN,
};
use jobs::postgres::__private::sql;
use jobs::{Enqueued, JobId, WorkerHandle};
use jobs_testkit::RowState::{Dead, Done, Running};
use jobs_testkit::{hours, JobRow};

use crate::plans::{assert_no_seq_scan, explain, indexes_read, plan_nodes, plan_of, scans_of};
use crate::support::{fast_config, leased_config, start_worker, Db};
use crate::test_jobs::{
    fails_when_released, record_run, send_receipt, stops_when_cancelled, sync_user,
    waits_for_cancel,
};

fn ops() -> CancelNote {
    CancelNote::by("ops@test").reason("runaway batch")
}

fn ids_of(jobs: &[admin::JobRef]) -> Vec<JobId> {
    jobs.iter().map(|job| job.id).collect()
}

/// Who asked to cancel job `id` and why, and whether it is finished.
async fn cancel_record(db: &Db, id: JobId) -> (Option<String>, Option<String>, bool, bool) {
    sqlx::query_as(
        "SELECT cancel_requested_by, cancel_reason, cancel_requested_at IS NOT NULL,
                finished_at IS NOT NULL
         FROM jobs_queue WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn ready_and_scheduled_jobs_are_cancelled_by_id_and_the_rest_reported() {
    let db = Db::new().await;
    let [due, scheduled, running, done, dead] = db
        .insert_all([
            JobRow::new("record_run"),
            JobRow::new("record_run").due_in(hours(1)),
            JobRow::new("record_run").state(Running),
            JobRow::new("record_run").state(Done),
            JobRow::new("record_run").state(Dead),
        ])
        .await
        .map(|ids| ids[0]);

    let report = admin::cancel(
        &db.pool,
        &[dead, scheduled, due, running, done, 999_999],
        &ops(),
    )
    .await
    .unwrap();
    assert_eq!(ids_of(&report.cancelled), [due, scheduled]);
    assert_eq!(ids_of(&report.requested), [running]);
    assert_eq!(
        report.not_cancellable,
        [
            NotCancellable {
                id: done,
                state: Some(JobState::Done)
            },
            NotCancellable {
                id: dead,
                state: Some(JobState::Dead)
            },
            NotCancellable {
                id: 999_999,
                state: None
            },
        ]
    );
    for id in [due, scheduled] {
        assert_eq!(db.job(id).await.state, "cancelled");
        assert_eq!(
            cancel_record(&db, id).await,
            (
                Some("ops@test".into()),
                Some("runaway batch".into()),
                true,
                true
            ),
            "who, why, and finished (for retention)"
        );
    }
    assert_eq!(db.job(running).await.state, "running", "keeps its lease");
    assert_eq!(
        cancel_record(&db, running).await,
        (
            Some("ops@test".into()),
            Some("runaway batch".into()),
            true,
            false
        )
    );
    assert_eq!(db.job(done).await.state, "done");
    assert_eq!(db.job(dead).await.state, "dead");

    // Again, by someone else: the first request is kept, cancelled jobs are not cancellable.
    let again = admin::cancel(&db.pool, &[due, running], &CancelNote::by("other"))
        .await
        .unwrap();
    assert!(again.cancelled.is_empty());
    assert_eq!(ids_of(&again.requested), [running]);
    assert_eq!(
        again.not_cancellable,
        [NotCancellable {
            id: due,
            state: Some(JobState::Cancelled)
        }]
    );
    assert_eq!(
        cancel_record(&db, running).await.0.as_deref(),
        Some("ops@test")
    );

    // A worker never runs a cancelled job.
    let worker = start_worker(&db.pool, &["record_run"], fast_config());
    let canary = record_run::enqueue(&db.pool, "after".into())
        .await
        .unwrap()
        .id();
    db.wait_for_state(canary, "done").await;
    worker.shutdown().await.unwrap();
    assert_eq!(db.runs_of(due).await + db.runs_of(scheduled).await, 0);
}

#[tokio::test]
async fn bad_notes_are_refused_before_the_database() {
    let db = Db::new().await;
    let id = record_run::enqueue(&db.pool, "x".into())
        .await
        .unwrap()
        .id();
    let long = CancelNote::by("x".repeat(MAX_CANCEL_NOTE_LEN + 1));
    assert!(matches!(
        admin::cancel(&db.pool, &[id], &long).await,
        Err(AdminError::InvalidText { field: "by", .. })
    ));
    let nul = CancelNote::by("ops").reason("a\0b");
    assert!(matches!(
        admin::cancel(&db.pool, &[id], &nul).await,
        Err(AdminError::InvalidText {
            field: "reason",
            ..
        })
    ));
    assert!(matches!(
        admin::cancel_by_dedupe_key(&db.pool, "no such kind!", "k", &ops()).await,
        Err(AdminError::InvalidKind(_))
    ));
    assert_eq!(db.job(id).await.state, "ready", "nothing changed");
}

#[tokio::test]
async fn a_job_is_cancelled_by_kind_and_dedupe_key_and_an_active_key_is_freed() {
    let db = Db::new().await;
    // Active scope: the key is held while the job is pending, freed once it is cancelled.
    let sync = sync_user::enqueue(&db.pool, 7).await.unwrap().id();
    let other_user = sync_user::enqueue(&db.pool, 8).await.unwrap().id();
    let report = admin::cancel_by_dedupe_key(&db.pool, "sync_user", "sync:7", &ops())
        .await
        .unwrap();
    assert_eq!(ids_of(&report.cancelled), [sync]);
    assert!(report.requested.is_empty() && report.not_cancellable.is_empty());
    assert_eq!(db.job(sync).await.state, "cancelled");
    assert_eq!(db.job(other_user).await.state, "ready");
    let again = sync_user::enqueue(&db.pool, 7).await.unwrap();
    assert!(
        matches!(again, Enqueued::New(id) if id != sync),
        "the active key is free: {again:?}"
    );

    // Retained scope: the cancelled job keeps holding its key until retention deletes it.
    let receipt = send_receipt::enqueue(&db.pool, 1).await.unwrap().id();
    let report = admin::cancel_by_dedupe_key(&db.pool, "send_receipt", "receipt:1", &ops())
        .await
        .unwrap();
    assert_eq!(ids_of(&report.cancelled), [receipt]);
    assert_eq!(
        send_receipt::enqueue(&db.pool, 1).await.unwrap(),
        Enqueued::Duplicate(receipt)
    );
    // Cancelling it again finds it through its retained key, finished.
    let again = admin::cancel_by_dedupe_key(&db.pool, "send_receipt", "receipt:1", &ops())
        .await
        .unwrap();
    assert_eq!(
        again.not_cancellable,
        [NotCancellable {
            id: receipt,
            state: Some(JobState::Cancelled)
        }]
    );
    // A key nobody holds: nothing to do.
    let none = admin::cancel_by_dedupe_key(&db.pool, "send_receipt", "receipt:2", &ops())
        .await
        .unwrap();
    assert_eq!(none, admin::CancelReport::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_cancels_in_batches_what_its_preview_counted() {
    let db = Db::new().await;
    let [retries, due, other_queue, other_kind, running] = db
        .insert_all([
            JobRow::new("newsletter")
                .queue("mail")
                .due_in(hours(1))
                .count(2_345),
            JobRow::new("newsletter").queue("mail").count(150),
            JobRow::new("newsletter").queue("bulk").due_in(hours(1)),
            JobRow::new("receipt").queue("mail").due_in(hours(1)),
            JobRow::new("newsletter").queue("mail").state(Running),
        ])
        .await;

    assert!(matches!(
        admin::preview_cancel(&db.pool, &CancelFilter::new()).await,
        Err(AdminError::EmptyFilter)
    ));
    assert!(matches!(
        admin::cancel_matching(&db.pool, &CancelFilter::new(), &ops()).await,
        Err(AdminError::EmptyFilter)
    ));

    let filter = CancelFilter::new()
        .kind("newsletter")
        .queue("mail")
        .state(ReadyState::Scheduled);
    let preview = admin::preview_cancel(&db.pool, &filter).await.unwrap();
    assert_eq!(preview, 2_345);
    let report = admin::cancel_matching(&db.pool, &filter, &ops())
        .await
        .unwrap();
    assert_eq!(report.cancelled.len() as u64, preview);
    assert_eq!(ids_of(&report.cancelled), retries, "each exactly once");
    assert!(report.requested.is_empty(), "running jobs are not selected");
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'cancelled'")
            .await,
        2_345
    );
    for id in [due[0], other_queue[0], other_kind[0]] {
        assert_eq!(db.job(id).await.state, "ready");
    }
    assert_eq!(db.job(running[0]).await.state, "running");
    assert_eq!(admin::preview_cancel(&db.pool, &filter).await.unwrap(), 0);

    // Due jobs of the kind, enqueued at least a second ago: the 150 due ones.
    let due_filter = CancelFilter::new()
        .kind("newsletter")
        .state(ReadyState::Due)
        .enqueued_at_least(Duration::from_millis(1));
    assert_eq!(
        admin::preview_cancel(&db.pool, &due_filter).await.unwrap(),
        150
    );
    let report = admin::cancel_matching(&db.pool, &due_filter, &ops())
        .await
        .unwrap();
    assert_eq!(ids_of(&report.cancelled), due);
    // Enqueued longer ago than an hour: none.
    let old = CancelFilter::every_ready_job().enqueued_at_least(hours(1));
    assert_eq!(admin::preview_cancel(&db.pool, &old).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_racing_the_claims_leaves_every_job_run_once_or_never() {
    const JOBS: usize = 600;
    let db = Db::new().await;
    let mut ids = Vec::with_capacity(JOBS);
    for n in 0..JOBS {
        ids.push(
            record_run::enqueue(&db.pool, format!("job {n}"))
                .await
                .unwrap()
                .id(),
        );
    }
    let workers = [
        start_worker(&db.pool, &["record_run"], fast_config()),
        start_worker(&db.pool, &["record_run"], fast_config()),
    ];
    // Cancel in chunks while the workers claim, from the end backwards, so the two meet.
    let mut cancelled = HashSet::new();
    let mut requested = HashSet::new();
    for chunk in ids.rchunks(25) {
        let report = admin::cancel(&db.pool, chunk, &ops()).await.unwrap();
        cancelled.extend(ids_of(&report.cancelled));
        requested.extend(ids_of(&report.requested));
    }
    db.wait_for_count(
        "every job done or cancelled",
        "SELECT count(*) FROM jobs_queue WHERE state IN ('done', 'cancelled')",
        JOBS as i64,
    )
    .await;
    for worker in workers {
        worker.shutdown().await.unwrap();
    }
    let runs: Vec<(JobId, String, i64)> = db
        .rows(
            "SELECT j.id, j.state, (SELECT count(*) FROM runs WHERE runs.job_id = j.id)
             FROM jobs_queue AS j ORDER BY j.id",
        )
        .await;
    let mut done = 0;
    for (id, state, runs) in &runs {
        match state.as_str() {
            "cancelled" => {
                assert_eq!(*runs, 0, "job {id} was cancelled and ran");
                assert!(cancelled.contains(id), "job {id} cancelled unreported");
            }
            "done" => {
                assert_eq!(*runs, 1, "job {id} ran {runs} times");
                assert!(!cancelled.contains(id), "job {id} reported cancelled");
                done += 1;
            }
            other => panic!("job {id} is {other}"),
        }
    }
    println!(
        "{JOBS} jobs: {} cancelled, {done} done ({} of them asked to stop while running)",
        cancelled.len(),
        requested.len()
    );
    assert_eq!(cancelled.len() + done, JOBS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_that_stops_when_asked_is_cancelled_not_retried() {
    let db = Db::new().await;
    let id = stops_when_cancelled::enqueue(&db.pool, false)
        .await
        .unwrap()
        .id();
    let worker = start_worker(&db.pool, &["stops_when_cancelled"], fast_config());
    db.wait_for_count(
        "the job to start",
        &format!("SELECT count(*) FROM runs WHERE job_id = {id}"),
        1,
    )
    .await;
    let report = admin::cancel(&db.pool, &[id], &ops()).await.unwrap();
    assert_eq!(ids_of(&report.requested), [id]);
    let row = db.wait_for_state(id, "cancelled").await;
    worker.shutdown().await.unwrap();
    assert_eq!(row.attempts, 1, "not retried");
    assert_eq!(db.runs_of(id).await, 1, "ran once");
    assert_eq!(row.errors.0.len(), 1, "its error is kept");
    assert_eq!(row.errors.0[0].kind, "transient");
    assert!(cancel_record(&db, id).await.3, "finished");
}

/// A `waits_for_cancel` job, started by a worker whose heartbeat beats every minute (longer
/// than `wait_for_state` waits: only an announcement of a request can tell the run in time).
async fn started_waiting_for_cancel(db: &Db) -> (JobId, WorkerHandle) {
    let id = waits_for_cancel::enqueue(&db.pool).await.unwrap().id();
    let config = leased_config(Duration::from_secs(120), Duration::from_secs(60));
    let worker = start_worker(&db.pool, &["waits_for_cancel"], config);
    db.wait_for_count(
        "the job to start",
        &format!("SELECT count(*) FROM runs WHERE job_id = {id}"),
        1,
    )
    .await;
    (id, worker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_hears_of_the_request_at_once_not_at_the_next_heartbeat() {
    let db = Db::new().await;
    let (id, worker) = started_waiting_for_cancel(&db).await;
    let report = admin::cancel(&db.pool, &[id], &ops()).await.unwrap();
    assert_eq!(ids_of(&report.requested), [id]);
    let row = db.wait_for_state(id, "cancelled").await;
    worker.shutdown().await.unwrap();
    assert_eq!((row.attempts, db.runs_of(id).await), (1, 1));
}

/// A request whose announcement the worker missed, sent while it was not listening (before its
/// first LISTEN, when a job may already run, or while its listening connection was down), is
/// heard as soon as it listens again, not at the next heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_missed_while_not_listening_is_heard_when_the_worker_listens_again() {
    let db = Db::new().await;
    let (id, worker) = started_waiting_for_cancel(&db).await;
    let listening = "SELECT count(*) FROM pg_stat_activity
                     WHERE datname = current_database() AND query LIKE 'LISTEN %'";
    db.wait_for_count("the worker to listen", listening, 1)
        .await;
    // The request as a cancel writes it, without its announcement: as if sent while nothing
    // listened. Then the listening connection is lost, and the worker listens again.
    db.execute(&format!(
        "UPDATE jobs_queue SET cancel_requested_at = now(), cancel_requested_by = 'ops@test'
         WHERE id = {id}"
    ))
    .await;
    db.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND query LIKE 'LISTEN %'",
    )
    .await;
    let row = db.wait_for_state(id, "cancelled").await;
    worker.shutdown().await.unwrap();
    assert_eq!((row.attempts, db.runs_of(id).await), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_that_succeeds_despite_the_request_is_done() {
    let db = Db::new().await;
    let id = stops_when_cancelled::enqueue(&db.pool, true)
        .await
        .unwrap()
        .id();
    let worker = start_worker(&db.pool, &["stops_when_cancelled"], fast_config());
    db.wait_for_count(
        "the job to start",
        &format!("SELECT count(*) FROM runs WHERE job_id = {id}"),
        1,
    )
    .await;
    admin::cancel(&db.pool, &[id], &ops()).await.unwrap();
    let row = db.wait_for_state(id, "done").await;
    worker.shutdown().await.unwrap();
    assert_eq!((row.attempts, db.runs_of(id).await), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retryable_failure_after_the_request_is_cancelled_not_scheduled_again() {
    let db = Db::new().await;
    db.create_releases().await;
    // Fails transiently once released, never looking at the request: the outcome's write turns
    // the retry into a cancellation (the worker's heartbeat, every 10 s, has not told it yet).
    let id = fails_when_released::enqueue(&db.pool).await.unwrap().id();
    let worker = start_worker(&db.pool, &["fails_when_released"], fast_config());
    db.wait_for_count(
        "the job to start",
        &format!("SELECT count(*) FROM runs WHERE job_id = {id}"),
        1,
    )
    .await;
    admin::cancel(&db.pool, &[id], &ops()).await.unwrap();
    db.release(id).await;
    let row = db.wait_for_state(id, "cancelled").await;
    worker.shutdown().await.unwrap();
    assert_eq!(row.attempts, 1);
    assert_eq!(db.runs_of(id).await, 1, "no retry ran");
    assert_eq!(row.errors.0.len(), 1);
    assert_eq!(row.errors.0[0].error, "failed after its release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescued_job_with_a_request_is_cancelled_not_run_again() {
    let db = Db::new().await;
    let id = record_run::enqueue(&db.pool, "orphan".into())
        .await
        .unwrap()
        .id();
    // Claimed by a worker that died, then asked to stop.
    db.abandon(id, 1).await;
    let report = admin::cancel(&db.pool, &[id], &ops()).await.unwrap();
    assert_eq!(ids_of(&report.requested), [id]);
    let worker = start_worker(&db.pool, &["record_run"], fast_config());
    let row = db.wait_for_state(id, "cancelled").await;
    worker.shutdown().await.unwrap();
    assert_eq!(db.runs_of(id).await, 0, "not run again");
    assert_eq!(row.errors.0.last().unwrap().kind, "lease_expired");
    assert!(cancel_record(&db, id).await.3, "finished");
}

/// A million retained rows of several kinds (mostly done), with a few thousand ready (due and
/// scheduled), some running, and keys in both dedupe scopes.
async fn insert_a_million_rows(db: &Db) {
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, run_at,
                                 finished_at, lease_token, lease_expires_at,
                                 dedupe_key, dedupe_scope)
         SELECT kind, queue, '{}'::jsonb, state, 1, 8,
                now() + CASE WHEN n % 2 = 0 THEN interval '1 hour' ELSE interval '0' END,
                CASE WHEN state IN ('done', 'dead') THEN now() END,
                CASE WHEN state = 'running' THEN gen_random_uuid() END,
                CASE WHEN state = 'running' THEN now() + interval '1 minute' END,
                CASE WHEN n % 4 = 0 THEN 'key:' || n END,
                CASE WHEN n % 8 = 0 THEN 'retained' WHEN n % 4 = 0 THEN 'active' END
         FROM generate_series(1, 1000000) AS n,
              LATERAL (SELECT CASE n % 3 WHEN 0 THEN 'newsletter' WHEN 1 THEN 'receipt'
                                         ELSE 'resize' END AS kind,
                              CASE n % 3 WHEN 2 THEN 'images' ELSE 'mail' END AS queue,
                              CASE WHEN n % 1000 = 1 THEN 'dead'
                                   WHEN n % 200 = 3 THEN 'ready'
                                   WHEN n % 500 = 7 THEN 'running'
                                   ELSE 'done' END AS state) AS row",
    )
    .await;
    db.execute("ANALYZE jobs_queue").await;
}

/// The indexes the plan of `query` reads, asserted not to scan the whole of `jobs_queue`.
async fn indexes_in_plan(
    db: &Db,
    name: &str,
    query: sqlx::query::QueryScalar<
        '_,
        sqlx::Postgres,
        serde_json::Value,
        sqlx::postgres::PgArguments,
    >,
) -> Vec<String> {
    let plan = plan_of(db, name, query).await;
    let nodes = plan_nodes(&plan);
    assert_no_seq_scan(&scans_of(&nodes, "jobs_queue"), name);
    indexes_read(&nodes)
        .into_iter()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cancel_statements_on_a_million_rows_read_indexes_only() {
    let db = Db::new().await;
    insert_a_million_rows(&db).await;

    let by_id = explain(sql::CANCEL_JOBS);
    let scans = indexes_in_plan(
        &db,
        "cancel by id on 1,000,000 rows",
        sqlx::query_scalar(&by_id)
            .bind("ops")
            .bind(None::<String>)
            .bind(vec![3_i64, 4, 203, 999_999]),
    )
    .await;
    assert!(
        scans.iter().all(|index| index == "jobs_queue_pkey"),
        "{scans:?}"
    );

    let by_key = explain(sql::CANCEL_BY_DEDUPE_KEY);
    let scans = indexes_in_plan(
        &db,
        "cancel by dedupe key on 1,000,000 rows",
        sqlx::query_scalar(&by_key)
            .bind("ops")
            .bind(None::<String>)
            .bind("newsletter")
            .bind("key:12"),
    )
    .await;
    for index in ["jobs_queue_dedupe_active", "jobs_queue_dedupe_retained"] {
        assert!(scans.iter().any(|read| read == index), "{index}: {scans:?}");
    }

    // By filter: the ready index, whichever conditions are given.
    let by_filter = explain(sql::CANCEL_MATCHING);
    let count = explain(sql::COUNT_MATCHING);
    // Kind, queue, scheduled, seconds since enqueued.
    type Filter<'a> = (Option<&'a str>, Option<&'a str>, Option<bool>, Option<f64>);
    let filters: [Filter<'_>; 3] = [
        (Some("newsletter"), Some("mail"), Some(true), None),
        (Some("resize"), None, None, Some(60.0)),
        (None, Some("images"), Some(false), None),
    ];
    for (kind, queue, scheduled, age) in filters {
        let name = format!("cancel by filter {kind:?} {queue:?} {scheduled:?} {age:?}");
        let scans = indexes_in_plan(
            &db,
            &name,
            sqlx::query_scalar(&by_filter)
                .bind("ops")
                .bind(None::<String>)
                .bind(kind)
                .bind(queue)
                .bind(scheduled)
                .bind(age)
                .bind(1_000_i64),
        )
        .await;
        assert!(
            scans.iter().any(|index| index == "jobs_queue_ready"),
            "{name}: {scans:?}"
        );
        let scans = indexes_in_plan(
            &db,
            &format!("count of {name}"),
            sqlx::query_scalar(&count)
                .bind(kind)
                .bind(queue)
                .bind(scheduled)
                .bind(age),
        )
        .await;
        assert!(
            scans.iter().all(|index| index == "jobs_queue_ready"),
            "count of {name}: {scans:?}"
        );
    }
}
