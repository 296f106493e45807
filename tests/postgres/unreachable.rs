//! A worker whose database cannot be reached: it says why at the first failure ("Connection
//! refused", not a pool timeout 30 s later), stops at once when asked to, and its run ends in
//! an error, so that the process can exit non-zero. Cut off later, it says why at once too.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::str::FromStr;

use jobs::{Worker, WorkerError, WorkerHandle};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::logs::{logged_about, logs};
use crate::support::{fast_config, Db};
use crate::test_jobs::enqueue_record_run;

/// How long the worker may take to say why, and to stop once asked.
const PROMPTLY: Duration = Duration::from_secs(5);

/// A port nothing listens on: bound, then released.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address").port()
}

/// A lazy pool to a closed port, with sqlx's default acquire timeout (30 s), as in the README.
fn pool_to_nowhere(port: u16) -> PgPool {
    PgPoolOptions::new()
        .max_connections(4)
        .connect_lazy(&format!("postgres://root@127.0.0.1:{port}/jobs"))
        .expect("a lazy pool")
}

/// A `record_run` worker on `pool`, with fast settings, not started.
fn record_run_worker(pool: PgPool) -> Worker {
    Worker::builder(pool.clone())
        .kinds(["record_run"])
        .state(pool)
        .config(fast_config())
        .build()
        .expect("worker builds")
}

/// Asserts that a worker's run ended in `NeverReachedDatabase`, saying "connection refused".
fn assert_never_reached_for_refusal<T: std::fmt::Debug>(ended: Result<T, WorkerError>) {
    match ended {
        Err(error @ WorkerError::NeverReachedDatabase { .. }) => {
            assert!(is_refused(&error.to_string()), "{error}");
        }
        other => panic!("expected NeverReachedDatabase, got {other:?}"),
    }
}

/// Whether `text` says the connection was refused.
fn is_refused(text: &str) -> bool {
    text.to_lowercase().contains("connection refused")
}

/// Waits until a log line about `needle` (an address) says "connection refused"; panics after
/// [`PROMPTLY`] with the lines about it.
async fn wait_for_refusal_logged(needle: &str) {
    jobs_testkit::wait_until_or(
        &format!("\"connection refused\" about {needle}"),
        PROMPTLY,
        || async { logged_about(needle).iter().any(|line| is_refused(line)) },
        || format!("{:?}", logged_about(needle)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_connection_names_the_cause_at_once() {
    let pool = pool_to_nowhere(closed_port());
    let started = Instant::now();
    let error = tokio::time::timeout(PROMPTLY, jobs::check_connection(&pool))
        .await
        .expect("an answer well within the pool's 30 s")
        .expect_err("nothing listens there");
    assert!(
        is_refused(&error.to_string()),
        "{error} after {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_cannot_reach_the_database_says_why_and_stops_at_once() {
    logs();
    let port = closed_port();
    let worker = record_run_worker(pool_to_nowhere(port));
    let (stop, stopped) = oneshot::channel::<()>();
    let run = tokio::spawn(worker.run_until(async {
        let _ = stopped.await;
    }));

    // It says why at the first failure, naming the address.
    wait_for_refusal_logged(&format!("127.0.0.1:{port}")).await;

    // Asked to stop during the outage, it does so at once, and says it never reached the
    // database, with the cause.
    stop.send(()).expect("the worker is running");
    let ended = tokio::time::timeout(PROMPTLY, run)
        .await
        .expect("the worker stops promptly during an outage")
        .expect("the run does not panic");
    assert_never_reached_for_refusal(ended);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_worker_that_never_reached_the_database_says_so_when_shut_down() {
    logs();
    let port = closed_port();
    let worker = record_run_worker(pool_to_nowhere(port)).start();
    wait_for_refusal_logged(&format!("127.0.0.1:{port}")).await;

    // The handle's answer is the run's answer: an application that started the worker and
    // shut it down learns it never reached the database, and can exit non-zero.
    let ended = tokio::time::timeout(PROMPTLY, worker.shutdown())
        .await
        .expect("the worker stops promptly during an outage");
    assert_never_reached_for_refusal(ended);
}

/// A TCP proxy to PostgreSQL that can be cut: its port closed, every connection through it
/// dropped.
struct Proxy {
    port: u16,
    accepting: JoinHandle<()>,
    piping: Arc<Mutex<Pipes>>,
}

/// The connections a [`Proxy`] pipes, and whether it was cut: one lock for both, so that no
/// connection accepted while the proxy is being cut outlives the cut.
#[derive(Default)]
struct Pipes {
    cut: bool,
    running: Vec<JoinHandle<()>>,
}

/// Where the proxy connects: the test server, over TCP or its Unix socket.
#[derive(Clone)]
enum Target {
    Tcp(String, u16),
    Unix(std::path::PathBuf),
}

impl Target {
    fn of(options: &PgConnectOptions) -> Self {
        match options.get_socket() {
            Some(dir) => Target::Unix(dir.join(format!(".s.PGSQL.{}", options.get_port()))),
            None => Target::Tcp(options.get_host().to_owned(), options.get_port()),
        }
    }
}

impl Proxy {
    async fn to(target: Target) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("its address").port();
        let piping: Arc<Mutex<Pipes>> = Arc::default();
        let pipes = Arc::clone(&piping);
        let accepting = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                let mut pipes = pipes.lock().unwrap();
                if pipes.cut {
                    // Accepted while the proxy was being cut: closed, never piped.
                    continue;
                }
                pipes.running.push(tokio::spawn(async move {
                    let _ = match target {
                        Target::Tcp(host, port) => match TcpStream::connect((host, port)).await {
                            Ok(mut outbound) => {
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await
                            }
                            Err(error) => Err(error),
                        },
                        Target::Unix(path) => match tokio::net::UnixStream::connect(path).await {
                            Ok(mut outbound) => {
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await
                            }
                            Err(error) => Err(error),
                        },
                    };
                }));
            }
        });
        Self {
            port,
            accepting,
            piping,
        }
    }

    /// Closes the port and drops every connection: the database is gone, "Connection refused".
    fn cut(&self) {
        let mut pipes = self.piping.lock().unwrap();
        pipes.cut = true;
        self.accepting.abort();
        for pipe in pipes.running.drain(..) {
            pipe.abort();
        }
    }
}

/// A worker whose pool reaches the test database through a [`Proxy`] (sqlx's default acquire
/// timeout, 30 s, and the default grace period, 30 s), once it has run a job through it.
async fn worker_through_proxy() -> (Db, Proxy, WorkerHandle) {
    let db = Db::new().await;
    let direct = PgConnectOptions::from_str(db.url()).expect("the test database's URL");
    let proxy = Proxy::to(Target::of(&direct)).await;
    let mut options = PgConnectOptions::new()
        .host("127.0.0.1")
        .port(proxy.port)
        .username(direct.get_username());
    if let Some(database) = direct.get_database() {
        options = options.database(database);
    }
    let through_proxy = PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await
        .expect("connect through the proxy");
    let worker = Worker::builder(through_proxy)
        .kinds(["record_run"])
        .state(db.pool.clone())
        .config(fast_config())
        .build()
        .expect("worker builds")
        .start();
    let id = enqueue_record_run(&db, "before the cut").await;
    db.wait_for_state(id, "done").await;
    (db, proxy, worker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cut_off_from_the_database_says_why_at_once() {
    logs();
    let (_db, proxy, worker) = worker_through_proxy().await;

    proxy.cut();
    wait_for_refusal_logged(&format!("127.0.0.1:{}", proxy.port)).await;
    worker.stop_now().await.expect("the worker stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_during_an_outage_with_no_job_running_ends_at_once() {
    logs();
    let (_db, proxy, worker) = worker_through_proxy().await;

    proxy.cut();
    // Two failed reconnections of LISTEN: by then the queue's claim loop (polling every 50 ms)
    // waits for a connection the pool cannot open.
    let deadline = Instant::now() + PROMPTLY;
    let needle = format!("127.0.0.1:{}", proxy.port);
    while logged_about(&needle)
        .iter()
        .filter(|line| line.contains("LISTEN failed") && is_refused(line))
        .count()
        < 2
    {
        assert!(Instant::now() < deadline, "{:?}", logged_about(&needle));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Nothing runs, nothing can be claimed: the shutdown has nothing to wait for.
    tokio::time::timeout(PROMPTLY, worker.shutdown())
        .await
        .expect("the shutdown ends promptly during an outage")
        .expect("the worker reached the database before the outage");
}
