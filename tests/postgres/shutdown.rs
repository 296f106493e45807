//! Graceful shutdown: jobs that finish within the grace period are done; the rest are handed
//! back as ready with their attempt not counted.

use std::time::Duration;

use crate::support::{fast_config, start_worker, Db};
use crate::test_jobs::{finishes_on_shutdown, ignores_shutdown};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_jobs_finish_within_grace_and_hands_back_the_rest() {
    let db = Db::new().await;
    let finishing = finishes_on_shutdown::enqueue(&db.pool).await.unwrap().id();
    let stuck = ignores_shutdown::enqueue(&db.pool).await.unwrap().id();
    let config = jobs::WorkerConfig {
        shutdown_grace: Duration::from_millis(300),
        ..fast_config()
    };
    let worker = start_worker(
        &db.pool,
        &["finishes_on_shutdown", "ignores_shutdown"],
        config,
    );
    db.wait_for_count("both jobs to start", "SELECT count(*) FROM runs", 2)
        .await;
    worker.shutdown().await.expect("the worker stops");

    let finished = db.job(finishing).await;
    assert_eq!(finished.state, "done");
    let handed_back = db.job(stuck).await;
    assert_eq!(handed_back.state, "ready");
    assert_eq!(
        handed_back.attempts, 0,
        "the interrupted attempt is not counted"
    );
    assert!(handed_back.ready_in_secs <= 0.0, "ready again at once");
    assert!(handed_back.errors.is_empty());
}
