//! Injects: a database whose connections default to `REPEATABLE READ` (`ALTER DATABASE ... SET
//! default_transaction_isolation`), as a team may set for its application. Proves: a worker
//! process started there (`run_until_signalled`, as the README shows) exits non-zero by itself,
//! saying which isolation it found, without a signal and before it claims anything: its claims,
//! heartbeats and outcomes need `READ COMMITTED`.

use std::time::{Duration, Instant};

use crate::support::{alone_on_shared_server, secs, Figures};

/// How long the worker may take to refuse and exit.
const PROMPTLY: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_on_connections_that_default_to_repeatable_read_exits_non_zero_by_itself() {
    let (_serial, db) = alone_on_shared_server().await;
    sqlx::raw_sql(&format!(
        "ALTER DATABASE \"{}\" SET default_transaction_isolation = 'repeatable read'",
        db.database.name()
    ))
    .execute(&db.pool)
    .await
    .expect("set the database's default isolation");
    let ids = db.enqueue_chaos_jobs(1, 0).await;

    let started = Instant::now();
    let mut worker = db.spawn_worker("worker");
    let status = worker.wait_exit(PROMPTLY).await;
    let exited_after = started.elapsed();
    assert_eq!(status.code(), Some(1), "{}", worker.log_tail(20));
    assert!(
        worker.log().contains("`repeatable read` isolation"),
        "{}",
        worker.log_tail(20)
    );
    assert_eq!(db.state_of(ids[0]).await, "ready");
    Figures::new("connections defaulting to REPEATABLE READ")
        .add("exit after start", secs(exited_after))
        .add("exit code", status.code().unwrap_or(-1))
        .print();
}
