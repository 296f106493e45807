//! A database and a stream per test, a relay publishing to that stream, and a publisher that
//! counts what it is asked to publish.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, Context};
use jobs_nats::testing::{create_stream, stored_messages, unique_name, StoredMessage};
use jobs_nats::NatsPublisher;
use jobs_postgres::outbox::{
    publish_in, OutboxId, OutboxMessage, PublishError, Publisher, Relay, RelayConfig, RetryPolicy,
};
use jobs_postgres::testing::TestDatabase;
use jobs_postgres::PgPool;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};
use sqlx::Row;

/// Another fresh, migrated database (keep the first value alive while using the pool).
pub async fn another_database() -> (TestDatabase, PgPool) {
    let database = TestDatabase::create().await.expect("create test database");
    let pool = database.pool(4).await.expect("connect to test database");
    jobs_postgres::migrate(&pool).await.expect("migrate");
    (database, pool)
}

/// The value of counter `name` in this process, through a recorder installed the first time.
pub fn counter(name: &str) -> u64 {
    static RECORDER: OnceLock<Arc<Counters>> = OnceLock::new();
    let counters = RECORDER.get_or_init(|| {
        let counters = Arc::new(Counters::default());
        metrics::set_global_recorder(Arc::clone(&counters))
            .expect("no other metrics recorder in this test process");
        counters
    });
    counters
        .values
        .lock()
        .unwrap()
        .get(name)
        .map_or(0, |value| value.load(Ordering::Relaxed))
}

/// A recorder that keeps counters only, summed over their labels.
#[derive(Default)]
struct Counters {
    values: Mutex<HashMap<String, Arc<AtomicU64>>>,
}

impl metrics::Recorder for Counters {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let value = Arc::clone(
            self.values
                .lock()
                .unwrap()
                .entry(key.name().to_owned())
                .or_default(),
        );
        Counter::from_arc(value)
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// A migrated database and a fresh stream on a NATS server.
pub struct Env {
    pub pool: PgPool,
    pub jetstream: Context,
    pub stream: String,
    pub prefix: String,
    database: TestDatabase,
}

impl Env {
    /// On the shared server.
    pub async fn new() -> Self {
        Self::on(&jobs_nats::testing::shared_url()).await
    }

    /// On the server at `url`.
    pub async fn on(url: &str) -> Self {
        let database = TestDatabase::create().await.expect("create test database");
        let pool = database.pool(8).await.expect("connect to test database");
        jobs_postgres::migrate(&pool).await.expect("migrate");
        let client = async_nats::connect(url)
            .await
            .unwrap_or_else(|error| panic!("connect to NATS at {url}: {error}"));
        let jetstream = jetstream::new(client);
        let stream = unique_name("outbox");
        let (_, prefix) = create_stream(&jetstream, &stream)
            .await
            .expect("create stream");
        Self {
            pool,
            jetstream,
            stream,
            prefix,
            database,
        }
    }

    /// Deletes this test's stream.
    pub async fn finish(self) {
        self.jetstream
            .delete_stream(&self.stream)
            .await
            .expect("delete the stream");
    }

    /// Another pool to the same database, as another process would have.
    pub async fn other_pool(&self) -> PgPool {
        self.database.pool(4).await.expect("connect")
    }

    /// The publisher to this test's stream.
    pub fn publisher(&self) -> NatsPublisher {
        NatsPublisher::new(self.jetstream.clone()).subject_prefix(self.prefix.clone())
    }

    /// A relay on `pool` with fast settings, publishing through `publisher`.
    pub fn relay<P: Publisher>(&self, pool: PgPool, publisher: P) -> Relay<P> {
        Relay::new(pool, publisher, fast_config()).expect("relay settings")
    }

    /// Writes and commits one event per `(topic, n)`, each in its own transaction, in order.
    pub async fn write(&self, events: &[(&str, i64)]) -> Vec<OutboxId> {
        write_to(&self.pool, events).await
    }

    /// Publishes `payload` to the stream under `message_id`, on subject `<prefix><topic>`, as
    /// another publisher (or an earlier relay) would have; waits for the acknowledgement.
    pub async fn send_as(&self, topic: &str, message_id: String, payload: String) {
        self.jetstream
            .send_publish(
                format!("{}{topic}", self.prefix),
                PublishMessage::build()
                    .message_id(message_id)
                    .payload(payload.into()),
            )
            .await
            .expect("publish")
            .await
            .expect("acknowledgement");
    }

    /// Runs a relay on this test's database and stream until no row is pending (20 s at most).
    pub async fn relay_until_none_pending(&self, what: &str) {
        self.relay_until_count("pending", 0, what).await;
    }

    /// Runs a relay on this test's database and stream until `count` rows are in `state` (20 s
    /// at most).
    pub async fn relay_until_count(&self, state: &str, count: i64, what: &str) {
        self.relay_on_until(&self.pool, self.publisher(), (state, count), what)
            .await;
    }

    /// Runs a relay on `pool`, publishing through `publisher`, until the outbox of `pool`
    /// holds `rows.1` rows in state `rows.0` (20 s at most).
    pub async fn relay_on_until<P: Publisher>(
        &self,
        pool: &PgPool,
        publisher: P,
        (state, count): (&str, i64),
        what: &str,
    ) {
        let relay = self.relay(pool.clone(), publisher);
        relay_until(relay, what, Duration::from_secs(20), || async {
            count_in(pool, state).await == count
        })
        .await;
    }

    /// The message id the relay publishes row `id` under.
    pub async fn message_id_of(&self, id: OutboxId) -> String {
        sqlx::query_scalar("SELECT message_id::text FROM jobs_outbox WHERE id = $1")
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .expect("message id")
    }

    /// Asserts that every message of `topic` (subject `<prefix><topic>`) is stored once, in the
    /// order of the rows `ids`, under their message ids.
    pub async fn assert_stored_in_order(&self, stored: &[StoredMessage], topic: &str, ids: &[i64]) {
        let mut expected = Vec::new();
        for id in ids {
            expected.push(self.message_id_of(*id).await);
        }
        let subject = format!("{}{topic}", self.prefix);
        let order: Vec<String> = stored
            .iter()
            .filter(|message| message.subject == subject)
            .map(|message| message.message_id.clone().unwrap_or_default())
            .collect();
        assert_eq!(order, expected, "messages of {topic}, in stream order");
    }

    /// Every message in this test's stream.
    pub async fn stored(&self) -> Vec<StoredMessage> {
        stored_messages(&self.jetstream, &self.stream)
            .await
            .expect("read the stream")
    }

    /// Outbox rows by state.
    pub async fn count(&self, state: &str) -> i64 {
        count_in(&self.pool, state).await
    }

    /// `(id, attempts, last_error)` of every row, by id.
    pub async fn rows(&self) -> Vec<(i64, String, i32, Option<String>)> {
        sqlx::query("SELECT id, state, attempts, last_error FROM jobs_outbox ORDER BY id")
            .fetch_all(&self.pool)
            .await
            .expect("rows")
            .into_iter()
            .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
            .collect()
    }

    /// Waits until no row is pending.
    pub async fn wait_until_all_published(&self, within: Duration) {
        wait_until("every outbox row to be published", within, || async {
            self.count("pending").await == 0
        })
        .await;
    }
}

/// Writes and commits one event per `(topic, n)` to the outbox of `pool`, each in its own
/// transaction, in order.
pub async fn write_to(pool: &PgPool, events: &[(&str, i64)]) -> Vec<OutboxId> {
    let mut ids = Vec::new();
    for (topic, n) in events {
        ids.push(publish_committed(pool, topic, &serde_json::json!({ "n": n })).await);
    }
    ids
}

/// Writes and commits one event of `payload` to `topic`, in a transaction of its own.
pub async fn publish_committed<T: serde::Serialize>(
    pool: &PgPool,
    topic: &str,
    payload: &T,
) -> OutboxId {
    let mut tx = pool.begin().await.expect("begin");
    let id = publish_in(&mut tx, topic, payload)
        .await
        .expect("publish_in");
    tx.commit().await.expect("commit");
    id
}

/// Outbox rows of `pool` in `state`.
pub async fn count_in(pool: &PgPool, state: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM jobs_outbox WHERE state = $1")
        .bind(state)
        .fetch_one(pool)
        .await
        .expect("count")
}

/// Relay settings for tests: short polls and backoffs, attempts enough for any outage here.
pub fn fast_config() -> RelayConfig {
    RelayConfig {
        batch_size: 20,
        poll_interval: Duration::from_millis(20),
        retry: RetryPolicy {
            max_attempts: 1_000,
            backoff_base: Duration::from_millis(50),
            backoff_max: Duration::from_millis(500),
            jitter: 0.5,
        },
        max_reconnect_delay: Duration::from_millis(200),
    }
}

/// Wraps a publisher, counting the publishes asked for, by row id.
#[derive(Clone)]
pub struct Counting<P> {
    pub inner: P,
    pub calls: Arc<Mutex<BTreeMap<i64, usize>>>,
}

impl<P> Counting<P> {
    pub fn new(inner: P) -> Self {
        Self {
            inner,
            calls: Arc::default(),
        }
    }

    pub fn calls(&self) -> BTreeMap<i64, usize> {
        self.calls.lock().unwrap().clone()
    }
}

impl<P: Publisher> Publisher for Counting<P> {
    async fn publish(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        *self.calls.lock().unwrap().entry(message.id).or_default() += 1;
        self.inner.publish(message).await
    }
}

/// Runs `relay` until `condition` holds (polled every 20 ms), then stops it.
pub async fn relay_until<P, F, Fut>(relay: Relay<P>, what: &str, within: Duration, condition: F)
where
    P: Publisher,
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let running = RunningRelay::start(relay);
    wait_until(what, within, condition).await;
    running.stop().await;
}

/// A relay running in a task of its own until stopped.
pub struct RunningRelay {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningRelay {
    /// Starts `relay` in a task.
    pub fn start<P: Publisher>(relay: Relay<P>) -> Self {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(relay.run_until(async {
            let _ = stopped.await;
        }));
        Self { stop, task }
    }

    /// Stops the relay and waits until its task has ended.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.expect("relay task");
    }
}

pub use jobs_testkit::wait_until_within as wait_until;
