//! The test helpers offered to applications (`jobs::testing`): a migrated database per test,
//! typed checks of what a transaction enqueued, and one job run inline.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use jobs::postgres::testing::{
    assert_enqueued, assert_none_enqueued, assert_nothing_enqueued, enqueued, run_job, RunJobError,
    TestDatabase,
};
use jobs::{AttemptError, Decision, JobKind, JobOptions, RegistryError};

use crate::support::Db;
use crate::test_jobs::{
    bad_input, cancels, charge_card, default_backoff, flaky, needs_mailer, panics_once, record_run,
    send_receipt, snoozes_once, sync_user, too_slow, Mailer,
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
    let id = record_run::enqueue(&db.pool, String::from("once"))
        .await
        .unwrap()
        .id();
    let mut conn = db.pool.acquire().await.unwrap();
    assert_enqueued::<record_run::Job>(
        &mut conn,
        &record_run::Args {
            label: String::from("once"),
        },
    )
    .await;
    let worker = db.start_worker(&["record_run"]);
    db.wait_for_state(id, "done").await;
    worker.shutdown().await.unwrap();
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
    assert_eq!(decision, Decision::Complete);
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
    assert_eq!(flaky_run(3).run().await.unwrap(), Decision::Complete);

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
        Decision::Complete
    );
}

/// A kind no `#[job]` registered.
struct Unregistered;

impl JobKind for Unregistered {
    const NAME: &'static str = "unregistered";
    type Args = send_receipt::Args;
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
