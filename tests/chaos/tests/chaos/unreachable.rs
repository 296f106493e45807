//! Injects: a worker process started against a port nothing listens on (a wrong port, or the
//! database not up yet), with sqlx's default 30 s acquire timeout, then SIGINT. Proves: the
//! worker logs "Connection refused" within seconds (not `PoolTimedOut` 30 s later), the signal
//! stops it at once, and it exits non-zero since it never reached the database.

use std::time::{Duration, Instant};

use jobs_chaos::WorkerSettings;

use crate::support::{secs, serial, Figures, Worker};

/// How long the worker may take to say why, and to exit once signalled.
const PROMPTLY: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_never_reaches_the_database_says_why_and_exits_non_zero_on_sigint() {
    let _serial = serial().await;
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        listener.local_addr().expect("its address").port()
    };
    let mut settings = WorkerSettings::fast(format!("postgres://root@127.0.0.1:{port}/jobs"));
    settings.acquire_timeout = Duration::from_secs(30);
    let started = Instant::now();
    let mut worker = Worker::spawn("worker", &settings);
    worker.wait_for_log("Connection refused", PROMPTLY).await;
    let said_why = started.elapsed();
    assert!(
        !worker.log().contains("PoolTimedOut") && !worker.log().contains("pool timed out"),
        "{}",
        worker.log()
    );

    let signalled = Instant::now();
    worker.signal("INT");
    let status = worker.wait_exit(PROMPTLY).await;
    let stopped_after = signalled.elapsed();
    assert_eq!(status.code(), Some(1), "{}", worker.log_tail(20));
    assert!(
        worker
            .log()
            .contains("stopped before the database ever accepted a connection"),
        "{}",
        worker.log_tail(20)
    );
    Figures::new("unreachable database")
        .add("cause logged after", secs(said_why))
        .add("exit after SIGINT", secs(stopped_after))
        .add("exit code", status.code().unwrap_or(-1))
        .print();
}
