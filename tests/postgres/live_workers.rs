//! Live workers: every worker process records itself (host, pid, version, queues with their
//! concurrency, kinds) while it runs, idle or not, and deletes its record when it stops; one not
//! seen for three of its intervals is gone. `check` reports due jobs no live worker can claim.

use std::time::Duration;

use jobs::admin::{self, HealthThresholds, LiveWorker, Violation, WorkerQueue};
use jobs::{Worker, WorkerConfig, WorkerHandle};
use sqlx::PgPool;

use crate::support::{fast_config, wait_until, Db};
use crate::test_jobs::record_run;

/// Worker settings with a presence refresh every 100 ms.
fn present_config() -> WorkerConfig {
    WorkerConfig {
        presence_interval: Duration::from_millis(100),
        ..fast_config()
    }
}

/// A worker of `kinds` (their own queues at the default concurrency) serving the queue `mail`
/// as well, 3 at once.
fn start_mail_worker(pool: &PgPool, kinds: &[&str]) -> WorkerHandle {
    Worker::builder(pool.clone())
        .kinds(kinds.iter().copied())
        .per_call_queue("mail", 3)
        .state(pool.clone())
        .config(present_config())
        .build()
        .expect("worker builds")
        .start()
}

/// The live worker `id`, once it is listed.
async fn wait_for_live(pool: &PgPool, id: uuid::Uuid) -> LiveWorker {
    wait_until(&format!("worker {id} to be live"), || async {
        admin::live_workers(pool)
            .await
            .unwrap()
            .iter()
            .any(|worker| worker.id == id)
    })
    .await;
    admin::live_workers(pool)
        .await
        .unwrap()
        .into_iter()
        .find(|worker| worker.id == id)
        .expect("listed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_worker_is_live_with_its_queues_and_kinds_and_gone_once_stopped() {
    let db = Db::new().await;
    let worker = start_mail_worker(&db.pool, &["record_run", "flaky"]);
    let live = wait_for_live(&db.pool, worker.id()).await;
    assert_eq!(live.pid, std::process::id());
    assert_eq!(live.version, env!("CARGO_PKG_VERSION"));
    assert!(!live.host.is_empty());
    assert_eq!(
        live.queues,
        [
            WorkerQueue {
                queue: String::from("default"),
                concurrency: 16
            },
            WorkerQueue {
                queue: String::from("mail"),
                concurrency: 3
            },
        ]
    );
    assert_eq!(live.kinds, ["flaky", "record_run"]);
    assert!(live.started_at <= live.last_seen_at);
    assert!(live.serves("mail", "record_run") && !live.serves("sync", "record_run"));

    // Idle, it still says it is running: its last sighting moves on.
    let first_seen = live.last_seen_at;
    wait_until("the idle worker to refresh its record", || async {
        wait_for_live(&db.pool, worker.id()).await.last_seen_at > first_seen
    })
    .await;
    let refreshed = wait_for_live(&db.pool, worker.id()).await;
    assert_eq!(refreshed.started_at, live.started_at, "the start is kept");

    worker.shutdown().await.expect("the worker stops");
    assert_eq!(admin::live_workers(&db.pool).await.unwrap(), []);
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_workers").await,
        0,
        "a graceful stop deletes the record"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_not_seen_for_three_intervals_is_gone_and_its_record_deleted() {
    let db = Db::new().await;
    let killed = start_mail_worker(&db.pool, &["record_run"]);
    let killed_id = killed.id();
    wait_for_live(&db.pool, killed_id).await;
    // A stop at once writes nothing more, as a killed process: its record stays.
    killed.stop_now().await.expect("the worker stops");
    assert_eq!(db.count("SELECT count(*) FROM jobs_workers").await, 1);
    assert_eq!(admin::live_workers(&db.pool).await.unwrap().len(), 1);

    // Three intervals (300 ms) and more without a refresh: gone.
    db.execute("UPDATE jobs_workers SET last_seen_at = now() - interval '301 milliseconds'")
        .await;
    assert_eq!(admin::live_workers(&db.pool).await.unwrap(), []);

    // The next refresh of another worker deletes the record of the gone one.
    let other = start_mail_worker(&db.pool, &["record_run"]);
    let other_id = other.id();
    wait_for_live(&db.pool, other_id).await;
    db.wait_for_count(
        "the gone worker's record to be deleted",
        &format!("SELECT count(*) FROM jobs_workers WHERE id = '{killed_id}'"),
        0,
    )
    .await;
    other.shutdown().await.expect("the worker stops");
}

/// Enqueues a `record_run` job into `queue`, due two minutes ago.
async fn enqueue_waiting(db: &Db, queue: &str) {
    let id = record_run::builder(String::from("waiting"))
        .queue(queue)
        .enqueue(&db.pool)
        .await
        .expect("enqueue")
        .id();
    sqlx::query("UPDATE jobs_queue SET run_at = now() - interval '2 minutes' WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap();
}

/// Records a live worker of `queues` running `kinds`, as a worker process would.
async fn record_worker(db: &Db, queues: &[&str], kinds: &[&str]) {
    let queues: Vec<serde_json::Value> = queues
        .iter()
        .map(|queue| serde_json::json!({"queue": queue, "concurrency": 4}))
        .collect();
    sqlx::query(
        "INSERT INTO jobs_workers (id, host, pid, version, queues, kinds, gone_after)
         VALUES (gen_random_uuid(), 'elsewhere', 7, '0.1.0', $1, $2, interval '1 hour')",
    )
    .bind(serde_json::Value::from(queues))
    .bind(
        kinds
            .iter()
            .map(|kind| (*kind).to_owned())
            .collect::<Vec<_>>(),
    )
    .execute(&db.pool)
    .await
    .unwrap();
}

/// `check`'s names of the violations, with the defaults.
async fn violations(db: &Db) -> Vec<Violation> {
    let stats = admin::stats(&db.pool).await.unwrap();
    admin::check(&stats, &HealthThresholds::default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_due_jobs_that_no_live_worker_can_claim() {
    let db = Db::new().await;
    enqueue_waiting(&db, "mail").await;
    // Delayed jobs are not due: they need no worker yet.
    record_run::builder(String::from("later"))
        .queue("reports")
        .delay(Duration::from_secs(3600))
        .enqueue(&db.pool)
        .await
        .unwrap();

    let nobody = violations(&db).await;
    assert!(
        matches!(&nobody[..], [Violation::QueueUnserved { queue, ready: 1, .. }] if queue == "mail"),
        "{nobody:?}"
    );

    // A live worker of the queue that does not run the kind.
    record_worker(&db, &["mail", "default"], &["flaky"]).await;
    let kind_missing = violations(&db).await;
    assert!(
        matches!(
            &kind_missing[..],
            [Violation::KindWithoutWorker { queue, kind, ready: 1, .. }]
                if queue == "mail" && kind == "record_run"
        ),
        "{kind_missing:?}"
    );
    assert_eq!(kind_missing[0].name(), "kind_without_worker");

    // One that runs the kind in another queue still cannot claim it.
    record_worker(&db, &["default"], &["record_run"]).await;
    let still = violations(&db).await;
    assert_eq!(
        still.iter().map(Violation::name).collect::<Vec<_>>(),
        ["kind_without_worker"],
        "{still:?}"
    );

    // One that runs the kind in its queue can.
    record_worker(&db, &["mail"], &["record_run"]).await;
    assert_eq!(violations(&db).await, []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gone_worker_serves_nothing_and_a_paused_queue_is_not_unserved() {
    let db = Db::new().await;
    enqueue_waiting(&db, "mail").await;
    record_worker(&db, &["mail"], &["record_run"]).await;
    assert_eq!(violations(&db).await, []);
    db.execute("UPDATE jobs_workers SET last_seen_at = now() - interval '2 hours'")
        .await;
    let gone = violations(&db).await;
    assert_eq!(
        gone.iter().map(Violation::name).collect::<Vec<_>>(),
        ["queue_unserved"]
    );

    admin::pause_queue(&db.pool, "mail", "ops", None)
        .await
        .unwrap();
    assert_eq!(
        violations(&db).await,
        [],
        "the pause is the queue's own alert"
    );
}
