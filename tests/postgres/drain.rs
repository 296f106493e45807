//! Many workers, many jobs: every job completed exactly once.

use jobs::postgres::worker::Completion;
use jobs::WorkerConfig;

use crate::support::{fast_config, start_worker, Db};
use crate::test_jobs::record_run;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_with_separate_pools_drain_2000_jobs_each_exactly_once() {
    drain_with_two_workers(fast_config()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_job_completion_drains_2000_jobs_each_exactly_once() {
    let config = WorkerConfig {
        completion: Completion::PerJob,
        ..fast_config()
    };
    drain_with_two_workers(config).await;
}

async fn drain_with_two_workers(config: WorkerConfig) {
    const JOBS: i64 = 2_000;
    let db = Db::new().await;
    let args = (0..JOBS).map(|n| record_run::Args {
        label: format!("job-{n}"),
    });
    record_run::enqueue_many(&db.pool, args).await.unwrap();

    let first_pool = db.other_pool(10).await;
    let second_pool = db.other_pool(10).await;
    let first = start_worker(&first_pool, &["record_run"], config.clone());
    let second = start_worker(&second_pool, &["record_run"], config);
    db.wait_for_count(
        "every job to be done",
        "SELECT count(*) FROM jobs_queue WHERE state = 'done'",
        JOBS,
    )
    .await;
    first.shutdown().await.expect("the worker stops");
    second.shutdown().await.expect("the worker stops");

    assert_eq!(db.count("SELECT count(*) FROM runs").await, JOBS);
    assert_eq!(
        db.count("SELECT count(DISTINCT job_id) FROM runs").await,
        JOBS
    );
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE attempts <> 1")
            .await,
        0
    );
}
