//! Injects: another client holding every connection a private cluster allows but two (idle
//! connections, opened until the server refuses with "too many clients"), while jobs are
//! enqueued; then it lets go. Proves: the worker process, starting on two connections, stays
//! up, waits and makes what progress it can, recovers fully when connections free up, and
//! loses nothing.

use std::time::{Duration, Instant};

use jobs_chaos::{chaos_job, APPLICATION_NAME};
use jobs_testkit::ThrowawayCluster;
use sqlx::{ConnectOptions, Connection, PgConnection};

use crate::support::{ids_of, secs, serial, ChaosDb, Figures, Worker};

const JOBS: usize = 500;
/// Connections left free for the worker while the hog holds the rest.
const LEFT_FOR_THE_WORKER: usize = 2;
const HOLD: Duration = Duration::from_secs(5);
/// SQLSTATE too_many_connections.
const TOO_MANY_CONNECTIONS: &str = "53300";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_exhausted_by_another_client() {
    let _serial = serial().await;
    let cluster = ThrowawayCluster::start().await.expect("start a cluster");
    let db = ChaosDb::on(&cluster.url()).await;
    let max_connections: String = sqlx::query_scalar("SHOW max_connections")
        .fetch_one(&db.pool)
        .await
        .expect("max_connections");
    // The test's own connection, taken before the hog, to enqueue and watch with.
    let mut watch = PgConnection::connect_with(&db.database.connect_options())
        .await
        .expect("connect");
    db.pool.close().await;

    // The hog: idle connections until the server refuses one, then a few given back.
    let hog_options = db
        .database
        .connect_options()
        .application_name("hog")
        .disable_statement_logging();
    let mut hog = Vec::new();
    loop {
        match PgConnection::connect_with(&hog_options).await {
            Ok(connection) => hog.push(connection),
            Err(sqlx::Error::Database(error))
                if error.code().as_deref() == Some(TOO_MANY_CONNECTIONS) =>
            {
                break
            }
            Err(error) => panic!("hog connection {}: {error}", hog.len() + 1),
        }
    }
    for connection in hog.drain(..LEFT_FOR_THE_WORKER) {
        connection.close().await.expect("give a connection back");
    }
    let held = hog.len();

    let worker = Worker::spawn("worker", &db.settings());
    worker.wait_started().await;
    let ids = ids_of(
        chaos_job::enqueue_many_in(
            &mut watch,
            (0..JOBS).map(|_| chaos_job::Args { sleep_ms: 5 }),
        )
        .await,
    );
    // The fault itself: the hog holds on for a while.
    let hold_until = Instant::now() + HOLD;
    let mut most_worker_connections = 0;
    while Instant::now() < hold_until {
        most_worker_connections =
            most_worker_connections.max(count_worker_connections(&mut watch).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut worker = worker;
    assert!(worker.is_alive(), "the worker exited while starved");
    let done_while_starved = count_done(&mut watch).await;

    let released = Instant::now();
    for connection in hog {
        connection.close().await.expect("release");
    }
    let release_took = released.elapsed();
    let pool = db.database.pool(4).await.expect("connect");
    let db = ChaosDb {
        pool,
        database: db.database,
    };
    db.wait_all_done(&ids, Duration::from_secs(60), &[&worker])
        .await;
    let recovered = released.elapsed();
    assert!(worker.is_alive(), "the worker exited");
    let lost = db.lost(&ids).await;
    let refusals = worker.log().matches("pool timed out").count();
    Figures::new("connections exhausted by another client while jobs are enqueued")
        .add("max_connections of the cluster", &max_connections)
        .add("idle connections held by the hog", held)
        .add(
            "worker connections while starved (most)",
            most_worker_connections,
        )
        .add("jobs enqueued", JOBS)
        .add("done while starved (5 s)", done_while_starved)
        .outcome(&db, lost.len())
        .await
        .add(
            "statements that timed out waiting for a connection",
            refusals,
        )
        .add("releasing the hog took", secs(release_took))
        .add("time to recover: hog gone -> all done", secs(recovered))
        .print();
    assert!(lost.is_empty(), "lost jobs: {lost:?}");
    assert!(held >= 90, "the hog held {held} connections");

    worker.stop_gracefully().await;
}

async fn count_done(connection: &mut PgConnection) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM jobs_queue WHERE state = 'done'")
        .fetch_one(connection)
        .await
        .expect("count done jobs")
}

async fn count_worker_connections(connection: &mut PgConnection) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
        .bind(APPLICATION_NAME)
        .fetch_one(connection)
        .await
        .expect("count the worker's connections")
}
