//! What happens to a job after each kind of run: done, retried on schedule, dead with its
//! errors kept, snoozed, cancelled.

use jobs::{DedupeScope, JobId, NewJob, RetryPolicy, RunAt};
use serde_json::Value;

use crate::support::Db;
use crate::test_jobs::{
    always_failing, bad_input, cancels, charge_card, default_backoff, enqueue_record_run, flaky,
    panics_once, snoozes_once, too_slow,
};

/// Enqueues a job of `kind` in queue `default` with `payload` and `priority` through the
/// untyped API, as another release's code (or a typo) would write it; returns its id.
async fn enqueue_untyped(db: &Db, kind: &'static str, payload: Value, priority: i16) -> JobId {
    let job = NewJob {
        kind,
        queue: "default".into(),
        payload,
        priority,
        max_attempts: 8,
        run_at: RunAt::Now,
        dedupe_key: None,
        dedupe_scope: DedupeScope::Retained,
        fair_key: None,
        limit_key: None,
        after: Vec::new(),
    };
    let mut conn = db.pool.acquire().await.unwrap();
    jobs::enqueue_job(&mut conn, &job).await.unwrap().id()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_job_runs_once_when_all_is_healthy() {
    let db = Db::new().await;
    let id = enqueue_record_run(&db, "once").await;
    let job = db.run_until(&["record_run"], id, "done").await;
    assert_eq!(job.attempts, 1);
    assert!(job.errors.is_empty());
    assert_eq!(db.runs_of(id).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_failures_retry_then_succeed_keeping_each_error() {
    let db = Db::new().await;
    let id = flaky::enqueue(&db.pool, 2).await.unwrap().id();
    let job = db.run_until(&["flaky"], id, "done").await;
    assert_eq!(job.attempts, 3);
    let errors: Vec<(i32, &str, &str)> = job
        .errors
        .iter()
        .map(|entry| (entry.attempt, entry.kind.as_str(), entry.error.as_str()))
        .collect();
    assert_eq!(
        errors,
        vec![
            (1, "transient", "outage, attempt 1"),
            (2, "transient", "outage, attempt 2")
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_failure_schedules_the_retry_inside_the_backoff_window() {
    let db = Db::new().await;
    let id = default_backoff::enqueue(&db.pool).await.unwrap().id();
    let worker = db.start_worker(&["default_backoff"]);
    crate::support::wait_until("the first attempt to fail", || async {
        db.job_value::<i64>(id, "jsonb_array_length(errors)::bigint")
            .await
            == 1
    })
    .await;
    worker.shutdown().await.expect("the worker stops");
    // run_at - time of failure must lie in the window of attempt 1: [15 s, 30 s].
    let delay: f64 = db
        .job_value(
            id,
            "extract(epoch FROM run_at - (errors->0->>'at')::timestamptz)::float8",
        )
        .await;
    let (shortest, longest) = RetryPolicy::default().backoff_window(1);
    assert!(
        delay >= shortest.as_secs_f64() - 0.01 && delay <= longest.as_secs_f64() + 0.01,
        "retry scheduled {delay} s after the failure, outside [{shortest:?}, {longest:?}]"
    );
    let job = db.job(id).await;
    assert_eq!((job.state.as_str(), job.attempts), ("ready", 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_attempts_go_dead_with_every_error_kept() {
    let db = Db::new().await;
    let id = always_failing::enqueue(&db.pool).await.unwrap().id();
    let job = db.run_until(&["always_failing"], id, "dead").await;
    assert_eq!(job.attempts, 3);
    assert_eq!(job.errors.len(), 3);
    for (number, entry) in job.errors.iter().enumerate() {
        assert_eq!(entry.attempt, i32::try_from(number).unwrap() + 1);
        assert_eq!(entry.kind, "transient");
        assert_eq!(entry.error, "connection refused");
        assert!(!entry.at.is_empty());
    }
    assert_eq!(db.runs_of(id).await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_errors_go_dead_at_once_with_the_error_kept() {
    let db = Db::new().await;
    let id = bad_input::enqueue(&db.pool, "not-an-email".into())
        .await
        .unwrap()
        .id();
    let declined = charge_card::enqueue(&db.pool, 500).await.unwrap().id();
    let [job, declined] = db
        .run_until_each(
            &["bad_input", "charge_card"],
            [(id, "dead"), (declined, "dead")],
        )
        .await;
    assert_eq!(job.attempts, 1);
    assert_eq!(job.errors.len(), 1);
    assert_eq!(job.errors[0].kind, "permanent");
    assert_eq!(
        job.errors[0].error,
        "`not-an-email` is not an email address"
    );
    // A user error type classified once as permanent is permanent through `?`.
    assert_eq!(declined.attempts, 1);
    assert_eq!(declined.errors[0].kind, "permanent");
    assert_eq!(declined.errors[0].error, "card declined");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panics_are_caught_and_retried() {
    let db = Db::new().await;
    let id = panics_once::enqueue(&db.pool).await.unwrap().id();
    let job = db.run_until(&["panics_once"], id, "done").await;
    assert_eq!(job.attempts, 2);
    assert_eq!(job.errors[0].kind, "panic");
    assert!(
        job.errors[0]
            .error
            .contains("invariant broken on first attempt"),
        "{}",
        job.errors[0].error
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_timeout_is_abandoned_as_a_transient_failure() {
    let db = Db::new().await;
    let id = too_slow::enqueue(&db.pool).await.unwrap().id();
    let job = db.run_until(&["too_slow"], id, "dead").await;
    assert_eq!(job.errors[0].kind, "timeout");
    assert!(
        job.errors[0].error.contains("100ms"),
        "{}",
        job.errors[0].error
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_payload_goes_dead_naming_the_kind_and_the_decode_error() {
    let db = Db::new().await;
    let id = enqueue_untyped(&db, "record_run", serde_json::json!({ "lable": "typo" }), 0).await;
    let job = db.run_until(&["record_run"], id, "dead").await;
    assert_eq!(job.attempts, 1);
    assert_eq!(job.errors[0].kind, "undecodable");
    let message = &job.errors[0].error;
    assert!(message.contains("record_run"), "{message}");
    assert!(message.contains("missing field `label`"), "{message}");
    assert_eq!(db.count("SELECT count(*) FROM runs").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_leaves_unknown_kinds_alone() {
    let db = Db::new().await;
    let unknown = enqueue_untyped(&db, "from_a_newer_release", serde_json::json!({}), 100).await;
    let known = enqueue_record_run(&db, "known").await;
    db.run_until(&["record_run"], known, "done").await;
    let job = db.job(unknown).await;
    assert_eq!((job.state.as_str(), job.attempts), ("ready", 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snooze_runs_again_later_without_using_an_attempt() {
    let db = Db::new().await;
    let id = snoozes_once::enqueue(&db.pool).await.unwrap().id();
    let job = db.run_until(&["snoozes_once"], id, "done").await;
    // max_attempts is 1: the snooze did not use it up.
    assert_eq!(job.attempts, 1);
    assert_eq!(db.runs_of(id).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_ends_the_job_with_its_reason() {
    let db = Db::new().await;
    let id = cancels::enqueue(&db.pool).await.unwrap().id();
    let job = db.run_until(&["cancels"], id, "cancelled").await;
    assert_eq!(job.errors[0].kind, "cancelled");
    assert_eq!(job.errors[0].error, "order was refunded");
}
