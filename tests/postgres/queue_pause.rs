//! Pausing a queue: no worker process claims its jobs until it is resumed, running jobs finish,
//! and resuming wakes idle workers at once.

use std::time::Duration;

use jobs::admin::{self, AdminError, HealthThresholds, PauseOutcome, ResumeOutcome};
use jobs::{JobId, Worker, WorkerConfig, WorkerHandle};
use sqlx::PgPool;

use crate::support::{fast_config, wait_until, Db};
use crate::test_jobs::{limited_record, record_run, waits_for_release};

/// A worker of `record_run` serving the queues `mail` and `other`, with `config`.
fn start_mail_worker(pool: &PgPool, config: WorkerConfig) -> WorkerHandle {
    start_worker_of(pool, &["record_run"], config)
}

/// A worker of `kinds` serving the queues `mail` and `other` besides the kinds' own, with
/// `config`.
fn start_worker_of(pool: &PgPool, kinds: &[&str], config: WorkerConfig) -> WorkerHandle {
    Worker::builder(pool.clone())
        .kinds(kinds.iter().copied())
        .per_call_queue("mail", 4)
        .per_call_queue("other", 4)
        .state(pool.clone())
        .config(config)
        .build()
        .expect("worker builds")
        .start()
}

/// Enqueues `count` runs of `record_run` into `queue`; returns their ids.
async fn enqueue_into(pool: &PgPool, queue: &str, count: usize) -> Vec<JobId> {
    let mut ids = Vec::new();
    for n in 0..count {
        let enqueued = record_run::builder(format!("{queue} {n}"))
            .queue(queue)
            .enqueue(pool)
            .await
            .expect("enqueue");
        ids.push(enqueued.id());
    }
    ids
}

/// How many jobs of `queue` are in `state`, and how many attempts they have made in all.
async fn jobs_in(pool: &PgPool, queue: &str, state: &str) -> (i64, i64) {
    sqlx::query_as(
        "SELECT count(*), coalesce(sum(attempts), 0)::int8 FROM jobs_queue
         WHERE queue = $1 AND state = $2",
    )
    .bind(queue)
    .bind(state)
    .fetch_one(pool)
    .await
    .expect("count jobs")
}

/// Waits until the database clock is `span` past the present one: time for the workers to have
/// polled (and claimed, had they been allowed) several times.
async fn wait_for_database_time(db: &Db, span: Duration) {
    let now: Vec<f64> = db
        .column("SELECT extract(epoch FROM clock_timestamp())::float8")
        .await;
    db.wait_for_clock_past("the workers to poll on", now[0], span.as_secs_f64())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_worker_processes_claim_nothing_from_a_paused_queue_and_everything_once_resumed() {
    let db = Db::new().await;
    let outcome = admin::pause_queue(&db.pool, "mail", "ops@test", Some("provider down"))
        .await
        .unwrap();
    assert_eq!(outcome, PauseOutcome::Paused);
    // Two workers, each with a pool of its own as another process would have.
    let config = fast_config();
    let first = start_mail_worker(&db.other_pool(5).await, config.clone());
    let second = start_mail_worker(&db.other_pool(5).await, config.clone());
    let mail = enqueue_into(&db.pool, "mail", 10).await;
    let other = enqueue_into(&db.pool, "other", 10).await;

    // The other queue's jobs, enqueued after the paused ones, all run...
    wait_until("every job of the other queue to be done", || async {
        jobs_in(&db.pool, "other", "done").await.0 == other.len() as i64
    })
    .await;
    // ...and the workers poll on for many intervals, claiming nothing from the paused queue.
    wait_for_database_time(&db, config.poll_interval * 10).await;
    assert_eq!(
        jobs_in(&db.pool, "mail", "ready").await,
        (mail.len() as i64, 0),
        "every paused job waits, ready, without an attempt spent"
    );

    let resumed = admin::resume_queue(&db.pool, "mail").await.unwrap();
    assert!(
        matches!(resumed, ResumeOutcome::Resumed { .. }),
        "{resumed:?}"
    );
    wait_until("every job of the resumed queue to be done", || async {
        jobs_in(&db.pool, "mail", "done").await == (mail.len() as i64, mail.len() as i64)
    })
    .await;
    first.shutdown().await.unwrap();
    second.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_wakes_idle_workers_at_once_and_a_pause_outlives_the_workers() {
    let db = Db::new().await;
    admin::pause_queue(&db.pool, "mail", "ops@test", None)
        .await
        .unwrap();
    // A worker that polls once an hour: only the resume's announcement can wake it in time.
    let idle = WorkerConfig {
        poll_interval: Duration::from_secs(3_600),
        ..fast_config()
    };
    let before_restart = start_mail_worker(&db.pool, idle.clone());
    let mail = enqueue_into(&db.pool, "mail", 5).await;
    before_restart.shutdown().await.unwrap();
    assert_eq!(admin::paused_queues(&db.pool).await.unwrap().len(), 1);

    let worker = start_mail_worker(&db.pool, idle);
    // The pause is in the database: the jobs wait for the new process too, which polls once an
    // hour, so that only the resume's announcement can start them in time.
    assert_eq!(
        jobs_in(&db.pool, "mail", "ready").await.0,
        mail.len() as i64
    );
    admin::resume_queue(&db.pool, "mail").await.unwrap();
    wait_until("the resumed queue's jobs to be done", || async {
        jobs_in(&db.pool, "mail", "done").await.0 == mail.len() as i64
    })
    .await;
    worker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_with_a_running_limit_is_not_claimed_from_a_paused_queue_either() {
    let db = Db::new().await;
    admin::pause_queue(&db.pool, "default", "ops@test", None)
        .await
        .unwrap();
    let config = fast_config();
    let worker = start_worker_of(&db.pool, &["limited_record", "record_run"], config.clone());
    for _ in 0..3 {
        limited_record::enqueue(&db.pool).await.unwrap();
    }
    let other = enqueue_into(&db.pool, "other", 3).await;
    wait_until("every job of the other queue to be done", || async {
        jobs_in(&db.pool, "other", "done").await.0 == other.len() as i64
    })
    .await;
    wait_for_database_time(&db, config.poll_interval * 10).await;
    assert_eq!(jobs_in(&db.pool, "default", "ready").await, (3, 0));
    admin::resume_queue(&db.pool, "default").await.unwrap();
    wait_until("the limited jobs to be done", || async {
        jobs_in(&db.pool, "default", "done").await == (3, 3)
    })
    .await;
    worker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_running_when_its_queue_is_paused_finishes_and_records_its_outcome() {
    let db = Db::new().await;
    db.create_releases().await;
    let id = waits_for_release::enqueue(&db.pool).await.unwrap().id();
    let worker = db.start_worker(&["waits_for_release"]);
    db.wait_for_state(id, "running").await;
    admin::pause_queue(&db.pool, "default", "ops@test", None)
        .await
        .unwrap();
    db.release(id).await;
    let row = db.wait_for_state(id, "done").await;
    assert_eq!(row.attempts, 1);
    worker.shutdown().await.unwrap();
}

#[tokio::test]
async fn pausing_twice_keeps_the_first_pause_and_resuming_a_running_queue_does_nothing() {
    let db = Db::new().await;
    let first = admin::pause_queue(&db.pool, "mail", "first@test", Some("incident 42"));
    assert_eq!(first.await.unwrap(), PauseOutcome::Paused);
    let second = admin::pause_queue(&db.pool, "mail", "second@test", None);
    assert_eq!(second.await.unwrap(), PauseOutcome::AlreadyPaused);
    let pauses = admin::paused_queues(&db.pool).await.unwrap();
    assert_eq!(pauses.len(), 1);
    assert_eq!(pauses[0].queue, "mail");
    assert_eq!(pauses[0].paused_by, "first@test");
    assert_eq!(pauses[0].reason.as_deref(), Some("incident 42"));

    assert!(matches!(
        admin::resume_queue(&db.pool, "mail").await.unwrap(),
        ResumeOutcome::Resumed { .. }
    ));
    assert_eq!(
        admin::resume_queue(&db.pool, "mail").await.unwrap(),
        ResumeOutcome::WasNotPaused
    );
    assert!(admin::paused_queues(&db.pool).await.unwrap().is_empty());
}

#[tokio::test]
async fn stats_list_a_pause_and_check_reports_it_once_past_the_threshold() {
    let db = Db::new().await;
    enqueue_into(&db.pool, "mail", 3).await;
    admin::pause_queue(&db.pool, "mail", "ops@test", Some("provider down"))
        .await
        .unwrap();
    let stats = admin::stats(&db.pool).await.unwrap();
    assert_eq!(stats.paused.len(), 1);
    assert_eq!(stats.paused[0].queue, "mail");
    assert!(admin::check(&stats, &HealthThresholds::default()).is_empty());
    let strict = HealthThresholds {
        max_paused: Duration::ZERO,
        ..HealthThresholds::default()
    };
    wait_until("the pause to last longer than zero", || async {
        let stats = admin::stats(&db.pool).await.unwrap();
        !admin::check(&stats, &strict).is_empty()
    })
    .await;
    let stats = admin::stats(&db.pool).await.unwrap();
    let lines: Vec<String> = admin::check(&stats, &strict)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("queue_paused: queue mail has been paused for ")
            && lines[0].contains("by ops@test, with 3 jobs waiting"),
        "{}",
        lines[0]
    );
}

#[tokio::test]
async fn a_bad_queue_name_or_note_is_refused_before_the_database() {
    let db = Db::new().await;
    for (queue, by, reason) in [
        ("", "ops", None),
        ("mail box", "ops", None),
        ("mail", "ops\0", None),
        ("mail", "ops", Some("down\0")),
    ] {
        let refused = admin::pause_queue(&db.pool, queue, by, reason).await;
        assert!(
            matches!(
                refused,
                Err(AdminError::InvalidQueue(_) | AdminError::InvalidText { .. })
            ),
            "{queue:?} {by:?} {reason:?}: {refused:?}"
        );
    }
    let long = "x".repeat(admin::MAX_PAUSE_NOTE_LEN + 1);
    assert!(matches!(
        admin::pause_queue(&db.pool, "mail", &long, None).await,
        Err(AdminError::InvalidText {
            field: "paused_by",
            ..
        })
    ));
    assert!(matches!(
        admin::resume_queue(&db.pool, "mail box").await,
        Err(AdminError::InvalidQueue(_))
    ));
    assert!(admin::paused_queues(&db.pool).await.unwrap().is_empty());
}
