//! Running a waiting job now: a delayed job or a retry backing off becomes due, idle workers
//! claim it at once, and its attempts and history stay.

use std::time::Duration;

use jobs::admin;
use jobs::WorkerConfig;

use crate::support::{fast_config, start_worker, wait_until, Db};
use crate::test_jobs::record_run;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_jobs_run_at_once_with_their_attempts_and_history_kept() {
    let db = Db::new().await;
    let delayed = record_run::builder("later".to_string())
        .delay(Duration::from_secs(3_600))
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    // A retry backing off for an hour after its first attempt failed.
    let retry = record_run::builder("retry".to_string())
        .delay(Duration::from_secs(3_600))
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    sqlx::query(
        "UPDATE jobs_queue SET attempts = 1, errors = jsonb_build_array(jsonb_build_object(
             'attempt', 1, 'at', now()::text, 'kind', 'transient', 'error', 'timed out'))
         WHERE id = $1",
    )
    .bind(retry)
    .execute(&db.pool)
    .await
    .unwrap();
    let done = record_run::enqueue(&db.pool, "now".to_string())
        .await
        .unwrap()
        .id();
    // A worker polling once an hour: only the announcement can wake it in time.
    let worker = start_worker(
        &db.pool,
        &["record_run"],
        WorkerConfig {
            poll_interval: Duration::from_secs(3_600),
            ..fast_config()
        },
    );
    db.wait_for_state(done, "done").await;

    let report = admin::run_now(&db.pool, &[delayed, retry, done, 999_999])
        .await
        .unwrap();
    let made_due: Vec<i64> = report.made_due.iter().map(|job| job.id).collect();
    assert_eq!(made_due, [delayed, retry]);
    assert_eq!(report.not_waiting, [done, 999_999]);

    let delayed_row = db.wait_for_state(delayed, "done").await;
    assert_eq!(delayed_row.attempts, 1);
    let retry_row = db.wait_for_state(retry, "done").await;
    assert_eq!(retry_row.attempts, 2, "the retry ran as its second attempt");
    assert_eq!(retry_row.errors.0.len(), 1, "its history is kept");

    // Done now: asking again changes nothing.
    let again = admin::run_now(&db.pool, &[delayed]).await.unwrap();
    assert!(again.made_due.is_empty());
    assert_eq!(again.not_waiting, [delayed]);
    worker.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_job_made_due_in_a_paused_queue_runs_once_the_queue_is_resumed() {
    let db = Db::new().await;
    let id = record_run::builder("later".to_string())
        .delay(Duration::from_secs(3_600))
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    admin::pause_queue(&db.pool, "default", "ops@test", None)
        .await
        .unwrap();
    let report = admin::run_now(&db.pool, &[id]).await.unwrap();
    assert_eq!(report.made_due.len(), 1);
    let worker = start_worker(&db.pool, &["record_run"], fast_config());
    admin::resume_queue(&db.pool, "default").await.unwrap();
    wait_until("the job to run once resumed", || async {
        db.job(id).await.state == "done"
    })
    .await;
    worker.shutdown().await.unwrap();
}
