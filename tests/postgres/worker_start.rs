//! A worker refuses to start when it could not run its jobs, naming what is missing.

use std::time::Duration;

use jobs::{Worker, WorkerError};
use sqlx::postgres::PgPoolOptions;

use crate::logs::logged_about;
use crate::support::{fast_config, refusal, Db};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_state_type_fails_at_start_naming_the_job_and_the_type() {
    let db = Db::new().await;
    let error = refusal(Worker::builder(db.pool.clone()).kinds(["needs_mailer"]));
    let message = error.to_string();
    assert!(matches!(error, WorkerError::Registry(_)), "{message}");
    assert!(message.contains("needs_mailer"), "{message}");
    assert!(message.contains("Mailer"), "{message}");
    let worker = Worker::builder(db.pool.clone())
        .kinds(["needs_mailer"])
        .state(crate::test_jobs::Mailer)
        .build();
    assert!(worker.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_kind_name_fails_at_start() {
    let db = Db::new().await;
    let error = refusal(Worker::builder(db.pool.clone()).kinds(["no_such_job"]));
    assert!(error.to_string().contains("no_such_job"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_registered_kind_runs_on_its_queue_by_default() {
    let db = Db::new().await;
    let worker = Worker::builder(db.pool.clone())
        .state(db.pool.clone())
        .state(crate::test_jobs::Mailer)
        .state(crate::exactly_once::Gate::default())
        .per_call_queue("extra", 2)
        .build()
        .unwrap();
    let queues = worker.queues();
    assert_eq!(queues.get("default"), Some(&16));
    assert_eq!(queues.get("sync"), Some(&16));
    assert_eq!(queues.get("extra"), Some(&2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_whose_heartbeat_is_not_shorter_than_its_lease_fails_at_start() {
    let db = Db::new().await;
    let registration = jobs::Registry::collect()
        .unwrap()
        .get("record_run")
        .copied()
        .unwrap();
    let mut slow_heartbeat = registration;
    slow_heartbeat.options.heartbeat = Some(std::time::Duration::from_secs(45));
    let error = refusal(
        Worker::builder(db.pool.clone())
            .registrations([slow_heartbeat])
            .state(db.pool.clone()),
    );
    assert!(
        matches!(
            error,
            WorkerError::HeartbeatNotShorterThanLease {
                kind: "record_run",
                ..
            }
        ),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_name_that_breaks_the_rules_fails_at_start() {
    let db = Db::new().await;
    for queue in [
        "mail queue".to_string(),
        "q".repeat(129),
        "mail\r\nPUB".to_string(),
    ] {
        let error = Worker::builder(db.pool.clone())
            .kinds(["default_backoff"])
            .queue(queue.clone(), 1)
            .build()
            .err()
            .unwrap_or_else(|| panic!("the worker must refuse queue {queue:?}"));
        assert!(matches!(error, WorkerError::QueueName(_)), "{error}");
    }
    Worker::builder(db.pool.clone())
        .kinds(["default_backoff"])
        .per_call_queue("billing.mail:v2/eu-west_1", 1)
        .build()
        .expect("a valid queue name");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_no_kind_of_the_worker_uses_fails_at_start_naming_the_known_ones() {
    let db = Db::new().await;
    let error = Worker::builder(db.pool.clone())
        .kinds(["default_backoff", "sync_user"])
        .queue("defualt", 4)
        .build()
        .err()
        .expect("a misspelt queue must not start an empty one");
    let message = error.to_string();
    match &error {
        WorkerError::UnknownQueue { queue, known } => {
            assert_eq!(queue, "defualt");
            assert_eq!(known, &["default", "sync"]);
        }
        other => panic!("expected UnknownQueue, got {other:?}"),
    }
    for needed in ["`defualt`", "`default`, `sync`", ".per_call_queue("] {
        assert!(message.contains(needed), "{needed} in: {message}");
    }
    // A queue of one of its kinds is taken, and so is a per-call one, declared as such.
    let worker = Worker::builder(db.pool.clone())
        .kinds(["default_backoff", "sync_user"])
        .queue("sync", 4)
        .per_call_queue("defualt", 1)
        .build()
        .expect("known and per-call queues");
    assert_eq!(worker.queues().get("sync"), Some(&4));
    assert_eq!(worker.queues().get("default"), Some(&16));
    assert_eq!(worker.queues().get("defualt"), Some(&1));
}

/// Builds a `default_backoff` worker running up to `running` jobs, on a lazy pool of at most
/// `connections` to the test's database.
fn build_on_a_pool_of(db: &Db, connections: u32, running: usize) -> Result<Worker, WorkerError> {
    let pool = PgPoolOptions::new()
        .max_connections(connections)
        .connect_lazy(db.url())
        .expect("a lazy pool");
    Worker::builder(pool)
        .kinds(["default_backoff"])
        .queue("default", running)
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_smaller_than_the_worker_can_use_is_warned_about_once_with_the_numbers() {
    crate::logs::logs();
    let db = Db::new().await;
    // 37 running jobs + 1 producer + listener, heartbeat, rescuer, presence, completer,
    // retention, gauges.
    build_on_a_pool_of(&db, 3, 37).expect("a small pool is a warning, not an error");
    let needle = "at most 3 connections, but this worker can use 45 at once";
    let warned = logged_about(needle);
    assert_eq!(warned.len(), 1, "warned once: {warned:?}");
    for part in [
        "WARN",
        "37 for running jobs, 1 for claiming, 7 for its listener, heartbeat, rescuer, presence, completer, retention, gauges",
        "max_connections(45)",
    ] {
        assert!(warned[0].contains(part), "{part} in {}", warned[0]);
    }

    // A pool large enough says nothing.
    build_on_a_pool_of(&db, 46, 38).expect("worker builds");
    assert_eq!(
        logged_about("this worker can use 46 at once"),
        Vec::<String>::new()
    );
}

/// What a worker's setup names is at the crate's root, beside `Worker` and `WorkerConfig`.
#[test]
fn the_names_a_worker_setup_reaches_for_are_at_the_root() {
    let config = jobs::WorkerConfig {
        completion: jobs::Completion::PerJob,
        retention: Some(jobs::RetentionConfig::default()),
        ..jobs::WorkerConfig::default()
    };
    let validated: Result<(), jobs::ConfigError> = config.validate();
    assert_eq!(validated, Ok(()));
    let schedule = jobs::Schedule::every("default_backoff", std::time::Duration::from_secs(60));
    assert!(schedule.is_ok(), "{schedule:?}");
    let stopped = jobs::Stopped::Gracefully {
        signal: jobs::Signal::Terminate,
    };
    assert_eq!(stopped.exit_code(), 0);
}

/// Asserts that a worker's run ended in `StricterIsolation`, naming the isolation found and the
/// one it needs.
fn assert_stricter_isolation<T: std::fmt::Debug>(ended: Result<T, WorkerError>) {
    match ended {
        Err(error @ WorkerError::StricterIsolation { .. }) => {
            let message = error.to_string();
            assert!(message.contains("`repeatable read`"), "{message}");
            assert!(message.contains("read committed"), "{message}");
        }
        other => panic!("expected StricterIsolation, got {other:?}"),
    }
}

/// A worker whose connections default to `REPEATABLE READ` (here set by the pool on each
/// connection, as a role or database setting would) stops before it claims anything, saying
/// which isolation it found and what it needs, whether its handle is waited on or it runs until
/// a shutdown that never comes; the job waits, ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_refuses_connections_that_default_to_a_stricter_isolation() {
    let db = Db::new().await;
    let job = crate::test_jobs::enqueue_record_run(&db, "waits").await;
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .after_connect(|connection, _| {
            Box::pin(async move {
                sqlx::query("SET default_transaction_isolation = 'repeatable read'")
                    .execute(connection)
                    .await
                    .map(|_| ())
            })
        })
        .connect(db.url())
        .await
        .expect("a pool");
    let worker = || {
        Worker::builder(pool.clone())
            .kinds(["record_run"])
            .state(pool.clone())
            .config(fast_config())
            .build()
            .expect("worker builds")
    };
    let within = Duration::from_secs(10);
    let waited = tokio::time::timeout(within, worker().start().wait()).await;
    assert_stricter_isolation(waited.expect("the worker stops by itself"));
    let run = tokio::time::timeout(within, worker().run_until(std::future::pending())).await;
    assert_stricter_isolation(run.expect("the run ends without a shutdown"));
    assert_eq!(db.job(job).await.state, "ready");
    assert_eq!(db.runs_of(job).await, 0);
}
