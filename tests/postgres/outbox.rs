//! The outbox without a broker: a scripted publisher stands in for it, so that failures,
//! ordering, parking, the health numbers and retention can be driven exactly.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobs::admin::{self, HealthThresholds, Retention, RetentionConfig, Violation};
use jobs::outbox::{
    publish_event_in, publish_in, Event, OutboxError, OutboxMessage, PublishError, Publisher,
    Relay, RelayConfig, RetryPolicy, TopicError,
};
use jobs::postgres::__private::sql;
use jobs::Worker;
use sqlx::PgPool;

use crate::plans::{explain, plan_nodes, scans_of};
use crate::support::{fast_config, wait_until, Db};

/// A publisher that fails as scripted per row id, then succeeds; logs every call as
/// `(id, attempt, succeeded)`.
#[derive(Clone, Default)]
struct Scripted {
    failures: Arc<Mutex<HashMap<i64, VecDeque<PublishError>>>>,
    log: Arc<Mutex<Vec<(i64, u32, bool)>>>,
}

impl Scripted {
    fn fail(&self, id: i64, errors: impl IntoIterator<Item = PublishError>) {
        self.failures
            .lock()
            .unwrap()
            .insert(id, errors.into_iter().collect());
    }

    fn log(&self) -> Vec<(i64, u32, bool)> {
        self.log.lock().unwrap().clone()
    }

    /// The ids published successfully, in order.
    fn published(&self) -> Vec<i64> {
        self.log()
            .into_iter()
            .filter(|(_, _, ok)| *ok)
            .map(|(id, _, _)| id)
            .collect()
    }
}

impl Publisher for Scripted {
    async fn publish(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        let outcome = match self
            .failures
            .lock()
            .unwrap()
            .get_mut(&message.id)
            .and_then(VecDeque::pop_front)
        {
            Some(error) => Err(error),
            None => Ok(()),
        };
        self.log
            .lock()
            .unwrap()
            .push((message.id, message.attempt, outcome.is_ok()));
        outcome
    }
}

/// A relay of `publisher` on the test's database, with [`config`].
fn relay<P: Publisher>(db: &Db, publisher: P, max_attempts: u32, backoff: Duration) -> Relay<P> {
    Relay::new(db.pool.clone(), publisher, config(max_attempts, backoff)).unwrap()
}

/// Batches of 10, polling every 20 ms, each row tried `max_attempts` times, `backoff` apart.
fn config(max_attempts: u32, backoff: Duration) -> RelayConfig {
    RelayConfig {
        batch_size: 10,
        poll_interval: Duration::from_millis(20),
        retry: RetryPolicy {
            max_attempts,
            backoff_base: backoff,
            backoff_max: backoff,
            jitter: 0.0,
        },
        ..RelayConfig::default()
    }
}

async fn write(pool: &PgPool, topic: &str, n: i64) -> i64 {
    let mut tx = pool.begin().await.unwrap();
    let id = publish_in(&mut tx, topic, &serde_json::json!({ "n": n }))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    id
}

async fn row(pool: &PgPool, id: i64) -> (String, i32, Option<String>) {
    sqlx::query_as("SELECT state, attempts, last_error FROM jobs_outbox WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn pending(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM jobs_outbox WHERE state = 'pending'")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Runs batches (one per poll) until no row is pending.
async fn relay_all<P: Publisher>(relay: &Relay<P>, pool: &PgPool) {
    wait_until("no pending outbox row", || async {
        relay.run_once().await.expect("relay a batch");
        pending(pool).await == 0
    })
    .await;
}

#[derive(serde::Serialize)]
struct OrderPlaced {
    order_id: i64,
}

impl Event for OrderPlaced {
    const TOPIC: &'static str = "orders.placed";
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_exists_exactly_when_its_transaction_commits() {
    let db = Db::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    publish_event_in(&mut tx, &OrderPlaced { order_id: 1 })
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let id = publish_event_in(&mut tx, &OrderPlaced { order_id: 2 })
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let rows: Vec<(i64, String, serde_json::Value)> =
        db.rows("SELECT id, topic, payload FROM jobs_outbox").await;
    assert_eq!(
        rows,
        [(
            id,
            "orders.placed".into(),
            serde_json::json!({ "order_id": 2 })
        )]
    );
    let empty = publish_in(&mut db.pool.acquire().await.unwrap(), "", &1).await;
    assert!(matches!(
        empty,
        Err(OutboxError::InvalidTopic(TopicError::Empty))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_row_holds_back_the_later_rows_of_its_topic_and_no_other() {
    let db = Db::new().await;
    let a1 = write(&db.pool, "a", 1).await;
    let b1 = write(&db.pool, "b", 1).await;
    let a2 = write(&db.pool, "a", 2).await;
    let b2 = write(&db.pool, "b", 2).await;
    let a3 = write(&db.pool, "a", 3).await;
    let publisher = Scripted::default();
    publisher.fail(
        a1,
        [
            PublishError::retryable("broker busy"),
            PublishError::retryable("broker still busy"),
        ],
    );
    let relay = relay(&db, publisher.clone(), 10, Duration::from_millis(200));
    relay_all(&relay, &db.pool).await;

    let published = publisher.published();
    let position = |id| published.iter().position(|p| *p == id).unwrap();
    assert!(position(a1) < position(a2) && position(a2) < position(a3));
    assert!(
        position(b2) < position(a1),
        "topic b went on while a1 backed off: {:?}",
        publisher.log()
    );
    let first_a1_success = publisher
        .log()
        .iter()
        .position(|(id, _, ok)| *id == a1 && *ok)
        .unwrap();
    assert!(
        publisher.log()[..first_a1_success]
            .iter()
            .all(|(id, _, _)| *id != a2 && *id != a3),
        "a2 and a3 waited for a1: {:?}",
        publisher.log()
    );
    assert_eq!(
        row(&db.pool, a1).await,
        ("published".into(), 3, Some("broker still busy".into())),
        "attempts counted, the last error kept"
    );
    assert_eq!(row(&db.pool, b1).await, ("published".into(), 1, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_out_of_attempts_or_failing_permanently_are_parked_then_replayed() {
    let db = Db::new().await;
    let doomed = write(&db.pool, "x", 1).await;
    let flaky = write(&db.pool, "y", 1).await;
    let after = write(&db.pool, "x", 2).await;
    let publisher = Scripted::default();
    publisher.fail(doomed, [PublishError::permanent("message too large")]);
    publisher.fail(
        flaky,
        [
            PublishError::retryable("timed out"),
            PublishError::retryable("timed out again"),
        ],
    );
    let relay = relay(&db, publisher.clone(), 2, Duration::from_millis(10));
    relay_all(&relay, &db.pool).await;

    assert_eq!(
        row(&db.pool, doomed).await,
        ("parked".into(), 1, Some("message too large".into()))
    );
    assert_eq!(
        row(&db.pool, flaky).await,
        ("parked".into(), 2, Some("timed out again".into()))
    );
    assert_eq!(row(&db.pool, after).await.0, "published", "x went on");

    let stats = admin::stats(&db.pool).await.unwrap();
    assert_eq!((stats.outbox.parked, stats.outbox.unpublished), (2, 0));
    assert_eq!(
        admin::check(&stats, &HealthThresholds::default()),
        [Violation::OutboxParked { parked: 2, max: 0 }]
    );
    let listed = admin::list_parked(&db.pool, None, 0, 10).await.unwrap();
    assert_eq!(
        listed.iter().map(|row| row.id).collect::<Vec<_>>(),
        [doomed, flaky]
    );
    assert_eq!(
        admin::list_parked(&db.pool, Some("y"), 0, 10)
            .await
            .unwrap()
            .len(),
        1
    );

    assert_eq!(
        admin::replay_parked(&db.pool, None).await.unwrap(),
        [doomed, flaky]
    );
    assert!(admin::replay_parked(&db.pool, None)
        .await
        .unwrap()
        .is_empty());
    relay_all(&relay, &db.pool).await;
    assert_eq!(row(&db.pool, doomed).await.0, "published");
    assert_eq!(
        row(&db.pool, flaky).await,
        ("published".into(), 1, Some("timed out again".into())),
        "attempts start again from 0 on replay"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oldest_unpublished_row_shows_in_stats_and_trips_check_past_its_threshold() {
    let db = Db::new().await;
    let stats = admin::stats(&db.pool).await.unwrap();
    assert_eq!(stats.outbox, admin::OutboxStats::default());

    let old = write(&db.pool, "a", 1).await;
    write(&db.pool, "a", 2).await;
    db.execute(&format!(
        "UPDATE jobs_outbox SET created_at = now() - interval '10 minutes' WHERE id = {old}"
    ))
    .await;
    let stats = admin::stats(&db.pool).await.unwrap();
    assert_eq!(stats.outbox.unpublished, 2);
    let age = stats.outbox.oldest_unpublished_age.unwrap();
    assert!(
        (Duration::from_secs(600)..Duration::from_secs(660)).contains(&age),
        "{age:?}"
    );
    let violations = admin::check(&stats, &HealthThresholds::default());
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert_eq!(violations[0].name(), "outbox_age");
    let patient = HealthThresholds {
        max_unpublished_age: Duration::from_secs(15 * 60),
        ..HealthThresholds::default()
    };
    assert_eq!(admin::check(&stats, &patient), []);

    // Published rows no longer count.
    let relay = relay(&db, Scripted::default(), 3, Duration::from_millis(10));
    relay_all(&relay, &db.pool).await;
    let stats = admin::stats(&db.pool).await.unwrap();
    assert_eq!(stats.outbox, admin::OutboxStats::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_published_rows_past_their_age_only() {
    let db = Db::new().await;
    let mut ids = Vec::new();
    for n in 0..4 {
        ids.push(write(&db.pool, "a", n).await);
    }
    db.execute(&format!(
        "UPDATE jobs_outbox SET state = 'published', attempts = 1,
                published_at = now() - interval '8 days' WHERE id = {};
         UPDATE jobs_outbox SET state = 'published', attempts = 1, published_at = now()
         WHERE id = {};
         UPDATE jobs_outbox SET state = 'parked', attempts = 1,
                parked_at = now() - interval '30 days' WHERE id = {}",
        ids[0], ids[1], ids[2]
    ))
    .await;

    let retention = Retention::new(db.pool.clone(), RetentionConfig::default()).unwrap();
    let report = retention.run_once().await.unwrap();
    assert_eq!(report.outbox, 1);
    let left: Vec<i64> = db.column("SELECT id FROM jobs_outbox ORDER BY id").await;
    assert_eq!(left, ids[1..], "recent, parked and pending rows are kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_its_relay_until_it_shuts_down() {
    let db = Db::new().await;
    let publisher = Scripted::default();
    let relay = relay(&db, publisher.clone(), 3, Duration::from_millis(10));
    let worker = Worker::builder(db.pool.clone())
        .kinds(["record_run"])
        .state(db.pool.clone())
        .config(fast_config())
        .relay(relay)
        .build()
        .unwrap()
        .start();
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(write(&db.pool, "a", n).await);
    }
    wait_until("the worker's relay to publish every row", || async {
        pending(&db.pool).await == 0
    })
    .await;
    worker.shutdown().await.expect("the worker stops");
    assert_eq!(publisher.published(), ids);
    write(&db.pool, "a", 5).await;
    assert_eq!(
        pending(&db.pool).await,
        1,
        "the relay stopped with the worker"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_claim_never_walks_published_rows() {
    let db = Db::new().await;
    db.execute(
        "INSERT INTO jobs_outbox (topic, payload, state, attempts, published_at)
         SELECT 'orders.placed', jsonb_build_object('n', n), 'published', 1, now()
         FROM generate_series(1, 50000) AS n",
    )
    .await;
    for n in 0..20 {
        write(&db.pool, if n % 2 == 0 { "a" } else { "b" }, n).await;
    }
    db.execute("ANALYZE jobs_outbox").await;
    let plan: serde_json::Value = sqlx::query_scalar(&explain(sql::CLAIM_OUTBOX))
        .bind(100_i64)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let scans = scans_of(&plan_nodes(&plan), "jobs_outbox");
    assert!(!scans.is_empty(), "{plan}");
    assert!(
        scans.iter().all(|(node, index)| node != "Seq Scan"
            && [
                "jobs_outbox_pending",
                "jobs_outbox_pending_topic",
                "jobs_outbox_retrying"
            ]
            .contains(&index.as_str())),
        "the claim must read pending rows through their partial indexes: {scans:?}"
    );
}

/// A business row and an event in the caller's transaction, then an event of `topic` and
/// `payload` written in the same transaction and refused: returns the error once the transaction
/// has committed, and checks that the business row and the good event did.
async fn refused_then_committed(
    db: &Db,
    what: &str,
    topic: &str,
    payload: serde_json::Value,
) -> OutboxError {
    db.execute("CREATE TABLE IF NOT EXISTS orders (label text NOT NULL)")
        .await;
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("INSERT INTO orders (label) VALUES ($1)")
        .bind(what)
        .execute(&mut *tx)
        .await
        .unwrap();
    let good = publish_in(
        &mut tx,
        "orders.placed",
        &serde_json::json!({ "what": what }),
    )
    .await
    .unwrap();
    let error = publish_in(&mut tx, topic, &payload)
        .await
        .expect_err(&format!("{what} must be refused"));
    tx.commit().await.expect("the caller's transaction commits");
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders WHERE label = $1")
        .bind(what)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(orders, 1, "{what}: the caller's own row committed");
    let events: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM jobs_outbox WHERE payload->>'what' = $1")
            .bind(what)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(events, [good], "{what}: only the good event was written");
    error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_topic_is_refused_before_the_database_and_the_callers_transaction_commits() {
    let db = Db::new().await;
    let too_long = format!("orders.{}", "x".repeat(250));
    let bad = [
        "",
        ".orders",
        "orders.",
        "orders..placed",
        "orders placed",
        "orders.placed\r\nPUB other.subject 2",
        "orders\tplaced",
        "orders.\u{0}",
        "orders.\u{85}placed",
        "orders.\u{a0}placed",
        "orders.*",
        "orders.>",
        too_long.as_str(),
    ];
    for topic in bad {
        let refused =
            refused_then_committed(&db, &format!("{topic:?}"), topic, serde_json::json!({})).await;
        assert!(
            matches!(refused, OutboxError::InvalidTopic(_)),
            "{topic:?}: {refused:?}"
        );
        assert!(!refused.to_string().contains(['\r', '\n']), "{refused}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_row_with_a_bad_topic_written_by_hand_is_refused_by_the_table() {
    let db = Db::new().await;
    for topic in [
        "orders placed",
        "orders.placed\r\nPUB x 1",
        "a..b",
        "a.>",
        "*",
    ] {
        let refused = sqlx::query("INSERT INTO jobs_outbox (topic, payload) VALUES ($1, '{}')")
            .bind(topic)
            .execute(&db.pool)
            .await
            .expect_err(topic);
        let constraint = refused
            .as_database_error()
            .and_then(|error| error.constraint())
            .map(str::to_owned);
        assert_eq!(
            constraint.as_deref(),
            Some("jobs_outbox_topic_syntax"),
            "{topic:?}: {refused}"
        );
    }
    let long = format!("a.{}", "b".repeat(254));
    assert!(
        sqlx::query("INSERT INTO jobs_outbox (topic, payload) VALUES ($1, '{}')")
            .bind(&long)
            .execute(&db.pool)
            .await
            .is_err()
    );
    sqlx::query("INSERT INTO jobs_outbox (topic, payload) VALUES ('orders.placed', '{}')")
        .execute(&db.pool)
        .await
        .expect("a good topic is accepted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_an_event_is_refused_naming_its_field_and_the_callers_transaction_commits() {
    let db = Db::new().await;
    let refused = refused_then_committed(
        &db,
        "nul in a value",
        "orders.placed",
        serde_json::json!({ "order": { "notes": ["fine", "bad\u{0}byte"] } }),
    )
    .await;
    assert!(
        matches!(&refused, OutboxError::NulInPayload { field, .. } if field == "payload.order.notes[1]"),
        "{refused:?}"
    );
    let refused = refused_then_committed(
        &db,
        "nul in a key",
        "orders.placed",
        serde_json::json!({ "a": { "b\u{0}c": 1 } }),
    )
    .await;
    assert!(
        matches!(&refused, OutboxError::NulInPayload { field, .. } if field == "payload.a.b\\0c (key)"),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_nested_deeper_than_a_decoder_reads_is_refused_and_the_callers_transaction_commits(
) {
    let db = Db::new().await;
    let mut payload = serde_json::json!(1);
    for _ in 0..200 {
        payload = serde_json::Value::Array(vec![payload]);
    }
    let refused = refused_then_committed(&db, "too deep", "orders.placed", payload).await;
    assert!(
        matches!(&refused, OutboxError::TooDeep { limit: 127, .. }),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_error_holding_nul_is_stored_with_the_nul_made_visible() {
    let db = Db::new().await;
    let retried = write(&db.pool, "a", 1).await;
    let parked = write(&db.pool, "b", 1).await;
    let publisher = Scripted::default();
    publisher.fail(retried, [PublishError::retryable("broker said \0busy")]);
    publisher.fail(parked, [PublishError::permanent("refused \0 for good")]);
    let relay = relay(&db, publisher.clone(), 3, Duration::from_secs(3600));
    // The parked row first: the retryable failure ends its batch.
    let mut reports = Vec::new();
    for _ in 0..2 {
        reports.push(relay.run_once().await.expect("the outcomes are written"));
    }
    assert_eq!(
        row(&db.pool, retried).await,
        ("pending".into(), 1, Some("broker said \\0busy".into()))
    );
    assert_eq!(
        row(&db.pool, parked).await,
        ("parked".into(), 1, Some("refused \\0 for good".into())),
        "{reports:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_row_with_a_topic_from_before_the_check_stays_parked_on_replay() {
    let db = Db::new().await;
    let good = write(&db.pool, "a", 1).await;
    let bad = db
        .count(
            "INSERT INTO jobs_outbox (topic, payload, state, attempts, parked_at, last_error)
         VALUES ('a b', '{}', 'parked', 3, now(), 'refused') RETURNING id",
        )
        .await;
    db.execute(&format!(
        "UPDATE jobs_outbox SET state = 'parked', parked_at = now() WHERE id = {good}"
    ))
    .await;
    assert_eq!(admin::replay_parked(&db.pool, None).await.unwrap(), [good]);
    assert_eq!(
        admin::replay_parked(&db.pool, Some(&[bad])).await.unwrap(),
        Vec::<i64>::new()
    );
    assert_eq!(row(&db.pool, bad).await.0, "parked");
}
