//! The test helpers offered to applications (`jobs::testing`): a migrated database per test,
//! typed checks of what a transaction enqueued, one job run inline, and a drain of due jobs.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use jobs::postgres::testing::{
    assert_enqueued, assert_none_enqueued, assert_nothing_enqueued, drain, enqueued, run_job,
    DrainError, RunJobError, TestDatabase,
};
use jobs::{AttemptError, Decision, JobKind, JobOptions, RegistryError, WorkerError};

use crate::support::Db;
use crate::test_jobs::{
    bad_input, cancels, chain, charge_card, default_backoff, enqueue_record_run, flaky,
    needs_mailer, panics_once, record_run, send_receipt, snoozes_once, sync_user, too_slow, Mailer,
};

/// The message of the panic that ended `task`.
async fn panic_of<T: std::fmt::Debug>(task: tokio::task::JoinHandle<T>) -> String {
    let error = task.await.expect_err("the assertion should have panicked");
    let payload: Box<dyn Any + Send> = error.into_panic();
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => payload
            .downcast::<&'static str>()
            .map(|message| (*message).to_owned())
            .unwrap_or_default(),
    }
}

#[tokio::test]
async fn a_migrated_test_database_takes_jobs_at_once() {
    let database = TestDatabase::migrated().await.expect("migrated database");
    let pool = database.pool(2).await.expect("pool");
    send_receipt::enqueue(&pool, 1042).await.expect("enqueue");
    let mut conn = pool.acquire().await.expect("connection");
    let receipts = enqueued::<send_receipt::Job>(&mut conn)
        .await
        .expect("enqueued");
    assert_eq!(receipts.len(), 1);
    assert_eq!(receipts[0].order_id, 1042);
    drop(conn);
    pool.close().await;
    database.close().await.expect("drop the database");
}

#[tokio::test]
async fn enqueued_sees_inside_the_open_transaction_and_nothing_else_does() {
    let db = Db::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    send_receipt::enqueue_in(&mut tx, 1042).await.unwrap();
    sync_user::enqueue_in(&mut tx, 5).await.unwrap();
    send_receipt::builder(7)
        .delay(Duration::from_secs(3600))
        .enqueue_in(&mut tx)
        .await
        .unwrap();

    let receipts = enqueued::<send_receipt::Job>(&mut tx).await.unwrap();
    let orders: Vec<i64> = receipts.iter().map(|args| args.order_id).collect();
    assert_eq!(orders, [1042, 7], "ready and scheduled, in enqueue order");
    let syncs = enqueued::<sync_user::Job>(&mut tx).await.unwrap();
    assert_eq!(syncs.len(), 1);
    assert_eq!(syncs[0].user_id, 5);

    let mut other = db.pool.acquire().await.unwrap();
    assert!(enqueued::<send_receipt::Job>(&mut other)
        .await
        .unwrap()
        .is_empty());
    assert_nothing_enqueued(&mut other).await;

    tx.rollback().await.unwrap();
    assert_nothing_enqueued(&mut other).await;
}

#[tokio::test]
async fn jobs_that_ran_are_no_longer_enqueued() {
    let db = Db::new().await;
    let id = enqueue_record_run(&db, "once").await;
    let mut conn = db.pool.acquire().await.unwrap();
    assert_enqueued::<record_run::Job>(
        &mut conn,
        &record_run::Args {
            label: String::from("once"),
        },
    )
    .await;
    db.run_until(&["record_run"], id, "done").await;
    assert_none_enqueued::<record_run::Job>(&mut conn).await;
    assert_nothing_enqueued(&mut conn).await;
}

#[tokio::test]
async fn assert_enqueued_passes_on_equal_arguments_and_lists_the_rest_when_it_fails() {
    let db = Db::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    send_receipt::enqueue_in(&mut tx, 7).await.unwrap();
    sync_user::enqueue_in(&mut tx, 5).await.unwrap();
    assert_enqueued::<send_receipt::Job>(&mut tx, &send_receipt::Args { order_id: 7 }).await;
    assert_enqueued::<sync_user::Job>(&mut tx, &sync_user::Args { user_id: 5 }).await;

    let message = panic_of(tokio::spawn(async move {
        assert_enqueued::<send_receipt::Job>(&mut tx, &send_receipt::Args { order_id: 1042 }).await;
    }))
    .await;
    assert!(
        message.starts_with(
            r#"expected a `send_receipt` job with arguments {"order_id":1042} waiting to run, but none was enqueued with those arguments; 2 jobs are waiting to run:"#
        ),
        "{message}"
    );
    assert!(
        message.contains(r#"`send_receipt` on queue `default`, priority 0, due "#)
            && message.contains(r#": {"order_id": 7}"#),
        "{message}"
    );
    assert!(
        message.contains(r#"`sync_user` on queue `sync`, priority 3, due "#)
            && message.contains(r#": {"user_id": 5}"#),
        "{message}"
    );
}

#[tokio::test]
async fn assert_enqueued_says_when_nothing_waits() {
    let db = Db::new().await;
    let mut conn = db.pool.acquire().await.unwrap();
    let message = panic_of(tokio::spawn(async move {
        assert_enqueued::<send_receipt::Job>(&mut conn, &send_receipt::Args { order_id: 1 }).await;
    }))
    .await;
    assert_eq!(
        message,
        r#"expected a `send_receipt` job with arguments {"order_id":1} waiting to run, but none was enqueued with those arguments; no job waits to run"#
    );
}

#[tokio::test]
async fn nothing_enqueued_checks_fail_naming_the_jobs_that_wait() {
    let db = Db::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    sync_user::enqueue_in(&mut tx, 5).await.unwrap();
    assert_none_enqueued::<send_receipt::Job>(&mut tx).await;

    let mut tx = tx;
    let message = panic_of(tokio::spawn(async move {
        assert_none_enqueued::<sync_user::Job>(&mut tx).await;
    }))
    .await;
    assert!(
        message.starts_with(
            "expected no `sync_user` job waiting to run; 1 job is waiting to run:\n  job "
        ) && message.ends_with(r#": {"user_id": 5}"#),
        "{message}"
    );

    let mut tx = db.pool.begin().await.unwrap();
    sync_user::enqueue_in(&mut tx, 6).await.unwrap();
    let message = panic_of(tokio::spawn(async move {
        assert_nothing_enqueued(&mut tx).await;
    }))
    .await;
    assert!(
        message.starts_with("expected no job waiting to run; 1 job is waiting to run:\n  job ")
            && message.contains("`sync_user` on queue `sync`"),
        "{message}"
    );
}

#[tokio::test]
async fn enqueued_refuses_payloads_that_do_not_decode() {
    let db = Db::new().await;
    let id = send_receipt::enqueue(&db.pool, 1).await.unwrap().id();
    sqlx::query("UPDATE jobs_queue SET payload = '{\"order\": \"one\"}' WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    let Err(error) = enqueued::<send_receipt::Job>(&mut conn).await else {
        panic!("the payload should not decode");
    };
    assert!(
        error.to_string().starts_with(&format!(
            "job {id} of kind `send_receipt` has a payload that does not decode into the kind's arguments: missing field `order_id`"
        )),
        "{error}"
    );
}

fn transient(message: &str) -> AttemptError {
    AttemptError {
        kind: "transient",
        message: message.to_owned(),
    }
}

#[tokio::test]
async fn run_job_completes_a_job_that_succeeds() {
    let decision = run_job::<send_receipt::Job>(send_receipt::Args { order_id: 1 })
        .run()
        .await
        .unwrap();
    assert_eq!(decision, Decision::Complete { output: None });
}

#[tokio::test]
async fn run_job_retries_with_the_kinds_backoff_for_the_attempt() {
    let run = |attempt| run_job::<default_backoff::Job>(default_backoff::Args {}).attempt(attempt);
    assert_eq!(
        run(1).run().await.unwrap(),
        Decision::Retry {
            delay: Duration::from_secs(30),
            error: transient("attempt 1 failed"),
        }
    );
    assert_eq!(
        run(3).run().await.unwrap(),
        Decision::Retry {
            delay: Duration::from_secs(120),
            error: transient("attempt 3 failed"),
        }
    );
    assert_eq!(
        run(3).jitter_sample(1.0).run().await.unwrap(),
        Decision::Retry {
            delay: Duration::from_secs(60),
            error: transient("attempt 3 failed"),
        },
        "the shortest delay of the window"
    );
    assert_eq!(
        run(8).run().await.unwrap(),
        Decision::Dead {
            error: transient("attempt 8 failed"),
        },
        "the last attempt's failure"
    );
}

#[tokio::test]
async fn run_job_sees_what_the_worker_decides_on_each_attempt() {
    let db = Db::new().await;
    let pool = db.pool.clone();
    let flaky_run = |attempt| {
        run_job::<flaky::Job>(flaky::Args { failures: 2 })
            .state(pool.clone())
            .attempt(attempt)
    };
    assert!(matches!(
        flaky_run(2).run().await.unwrap(),
        Decision::Retry { delay, error } if delay == Duration::from_millis(20) && error.message == "outage, attempt 2"
    ));
    assert_eq!(
        flaky_run(3).run().await.unwrap(),
        Decision::Complete { output: None }
    );

    assert_eq!(
        run_job::<bad_input::Job>(bad_input::Args {
            email: String::from("nope")
        })
        .run()
        .await
        .unwrap(),
        Decision::Dead {
            error: AttemptError {
                kind: "permanent",
                message: String::from("`nope` is not an email address"),
            }
        }
    );
    assert!(matches!(
        run_job::<charge_card::Job>(charge_card::Args { amount_cents: 100 }).run().await.unwrap(),
        Decision::Dead { error } if error.kind == "permanent" && error.message == "card declined"
    ));
    assert!(matches!(
        run_job::<panics_once::Job>(panics_once::Args {}).state(db.pool.clone()).run().await.unwrap(),
        Decision::Retry { error, .. } if error.kind == "panic"
            && error.message == "panicked: invariant broken on first attempt"
    ));
    assert_eq!(
        run_job::<too_slow::Job>(too_slow::Args {})
            .run()
            .await
            .unwrap(),
        Decision::Dead {
            error: AttemptError {
                kind: "timeout",
                message: String::from("timed out after 100ms"),
            }
        }
    );
    // Snoozes when it has no run recorded yet: a database where the runs above are not.
    let fresh = Db::new().await;
    assert_eq!(
        run_job::<snoozes_once::Job>(snoozes_once::Args {})
            .state(fresh.pool.clone())
            .run()
            .await
            .unwrap(),
        Decision::Snooze {
            delay: Duration::from_millis(10)
        }
    );
    assert_eq!(
        run_job::<cancels::Job>(cancels::Args {})
            .run()
            .await
            .unwrap(),
        Decision::Cancel {
            reason: String::from("order was refunded")
        }
    );
}

#[tokio::test]
async fn run_job_hands_state_to_the_job_and_refuses_to_run_without_it() {
    let args = || needs_mailer::Args {
        to: String::from("ada@example.com"),
    };
    let error = run_job::<needs_mailer::Job>(args())
        .run()
        .await
        .expect_err("no mailer");
    assert!(
        matches!(
            &error,
            RunJobError::Registry(RegistryError::MissingState {
                kind: "needs_mailer",
                ..
            })
        ),
        "{error:?}"
    );
    assert_eq!(
        run_job::<needs_mailer::Job>(args())
            .shared_state(Arc::new(Mailer))
            .run()
            .await
            .unwrap(),
        Decision::Complete { output: None }
    );
}

/// A kind no `#[job]` registered.
struct Unregistered;

impl JobKind for Unregistered {
    const NAME: &'static str = "unregistered";
    type Args = send_receipt::Args;
    type Output = ();
    const OPTIONS: JobOptions = JobOptions::DEFAULT;
}

#[tokio::test]
async fn run_job_refuses_unknown_kinds_and_attempts_out_of_range() {
    let error = run_job::<Unregistered>(send_receipt::Args { order_id: 1 })
        .run()
        .await
        .expect_err("unregistered");
    assert!(
        matches!(&error, RunJobError::Registry(RegistryError::UnknownKind(kind)) if kind == "unregistered"),
        "{error:?}"
    );
    for attempt in [0, 9] {
        let error = run_job::<default_backoff::Job>(default_backoff::Args {})
            .attempt(attempt)
            .run()
            .await
            .expect_err("out of range");
        assert_eq!(
            error.to_string(),
            format!("attempt {attempt} of a `default_backoff` job cannot run: its attempts run from 1 to 8")
        );
    }
}

#[tokio::test]
async fn drain_runs_due_jobs_and_the_jobs_they_enqueue_and_records_them_done() {
    let db = Db::new().await;
    let first = chain::enqueue(&db.pool, 3).await.unwrap().id();
    let runs = drain(&db.pool).kind::<chain::Job>().run().await.unwrap();
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert_eq!(runs[0].id, first);
    for run in &runs {
        assert_eq!(run.kind, "chain");
        assert_eq!(run.attempt, 1);
        assert_eq!(run.decision, Decision::Complete { output: None });
        let row = db.job(run.id).await;
        assert_eq!((row.state.as_str(), row.attempts), ("done", 1));
    }
    assert_nothing_enqueued(&mut db.pool.acquire().await.unwrap()).await;
}

#[tokio::test]
async fn drain_writes_each_outcome_as_the_worker_does_and_leaves_the_rest() {
    let db = Db::new().await;
    let failing_id = default_backoff::enqueue(&db.pool).await.unwrap().id();
    let bad_id = bad_input::enqueue(&db.pool, String::from("nope"))
        .await
        .unwrap()
        .id();
    let cancelled_id = cancels::enqueue(&db.pool).await.unwrap().id();
    let later_id = send_receipt::builder(1)
        .delay(Duration::from_secs(3600))
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    let other_kind_id = enqueue_record_run(&db, "not drained").await;

    let runs = drain(&db.pool)
        .kind::<default_backoff::Job>()
        .kind::<bad_input::Job>()
        .kind::<cancels::Job>()
        .kind::<send_receipt::Job>()
        .state(db.pool.clone())
        .run()
        .await
        .unwrap();
    let decision_of = |id| {
        runs.iter()
            .find(|run| run.id == id)
            .map(|run| run.decision.clone())
    };
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert!(matches!(
        decision_of(failing_id),
        Some(Decision::Retry { delay, error })
            if error.message == "attempt 1 failed" && delay >= Duration::from_secs(15)
    ));
    assert!(matches!(
        decision_of(bad_id),
        Some(Decision::Dead { error }) if error.kind == "permanent"
    ));
    assert_eq!(
        decision_of(cancelled_id),
        Some(Decision::Cancel {
            reason: String::from("order was refunded")
        })
    );

    let failing_row = db.job(failing_id).await;
    assert_eq!(
        (failing_row.state.as_str(), failing_row.attempts),
        ("ready", 1)
    );
    assert_eq!(failing_row.errors.0.len(), 1);
    assert_eq!(failing_row.errors.0[0].kind, "transient");
    assert!(
        failing_row.ready_in_secs > 10.0,
        "ready again after its backoff, 15 to 30 s"
    );
    let bad_row = db.job(bad_id).await;
    assert_eq!(
        (bad_row.state.as_str(), bad_row.errors.0.len()),
        ("dead", 1)
    );
    assert_eq!(db.job(cancelled_id).await.state, "cancelled");
    let later_row = db.job(later_id).await;
    assert_eq!((later_row.state.as_str(), later_row.attempts), ("ready", 0));
    let other_row = db.job(other_kind_id).await;
    assert_eq!((other_row.state.as_str(), other_row.attempts), ("ready", 0));
}

#[tokio::test]
async fn drain_stops_at_its_bound_leaving_the_rest_unclaimed() {
    let db = Db::new().await;
    chain::enqueue(&db.pool, 5).await.unwrap();
    let error = drain(&db.pool)
        .kind::<chain::Job>()
        .max_runs(2)
        .run()
        .await
        .expect_err("more than 2 runs");
    let DrainError::TooManyRuns { max_runs, runs } = error else {
        panic!("{error:?}");
    };
    assert_eq!(max_runs, 2);
    assert_eq!(runs.len(), 2);
    let mut conn = db.pool.acquire().await.unwrap();
    let waiting = enqueued::<chain::Job>(&mut conn).await.unwrap();
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].links, 3);
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'running'")
            .await,
        0
    );
}

#[tokio::test]
async fn drain_refuses_what_a_worker_refuses() {
    let db = Db::new().await;
    needs_mailer::enqueue(&db.pool, String::from("ada@example.com"))
        .await
        .unwrap();
    let error = drain(&db.pool)
        .kind::<needs_mailer::Job>()
        .run()
        .await
        .expect_err("no mailer");
    assert!(
        matches!(
            error,
            DrainError::Worker(WorkerError::Registry(RegistryError::MissingState { .. }))
        ),
        "{error:?}"
    );
    let error = drain(&db.pool).run().await.expect_err("no kinds");
    assert!(
        matches!(error, DrainError::Worker(WorkerError::NoKinds)),
        "{error:?}"
    );
    let runs = drain(&db.pool)
        .kind::<needs_mailer::Job>()
        .state(Mailer)
        .run()
        .await
        .unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].decision, Decision::Complete { output: None });
}

#[tokio::test]
async fn a_drain_once_the_backoff_is_over_runs_the_next_attempt() {
    let db = Db::new().await;
    let id = default_backoff::enqueue(&db.pool).await.unwrap().id();
    let drain_once = || drain(&db.pool).kind::<default_backoff::Job>().run();
    let first = drain_once().await.unwrap();
    assert_eq!(first.len(), 1, "the retry is not due yet: {first:?}");
    assert!(drain_once().await.unwrap().is_empty());

    // The backoff is over.
    sqlx::query("UPDATE jobs_queue SET run_at = now() WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap();
    let second = drain_once().await.unwrap();
    assert_eq!(second.len(), 1, "{second:?}");
    assert_eq!((second[0].id, second[0].attempt), (id, 2));
    assert!(matches!(
        &second[0].decision,
        Decision::Retry { delay, error }
            if error.message == "attempt 2 failed" && *delay >= Duration::from_secs(30)
    ));
    let row = db.job(id).await;
    assert_eq!((row.attempts, row.errors.0.len()), (2, 2));
}
