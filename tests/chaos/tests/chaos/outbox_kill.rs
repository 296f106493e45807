//! Fault: a relay process SIGKILLed after the broker acknowledged a row and before the row was
//! marked published. Proves: the row stays pending, the next relay publishes it again with the
//! same message id, and the stream (its `Nats-Msg-Id` duplicate window) keeps one message, which
//! the publisher recognises as the row's own: the row is published, not parked.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobs::outbox::{publish_in, OutboxMessage, PublishError, Publisher, Relay, RelayConfig};
use jobs_nats::testing::{create_stream, shared_url, stored_messages, unique_name};
use jobs_nats::{async_nats, NatsPublisher};

use crate::support::{alone_on_shared_server, wait_until};

/// Records the ids it is asked to publish.
struct Recording {
    inner: NatsPublisher,
    ids: Arc<Mutex<Vec<i64>>>,
}

impl Publisher for Recording {
    async fn publish(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        self.ids.lock().unwrap().push(message.id);
        self.inner.publish(message).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_killed_between_publish_and_mark_leaves_one_message_in_the_stream() {
    let (_serial, db) = alone_on_shared_server().await;
    let client = async_nats::connect(shared_url())
        .await
        .expect("connect to NATS");
    let jetstream = async_nats::jetstream::new(client);
    let stream = unique_name("outbox_kill");
    let (_, prefix) = create_stream(&jetstream, &stream).await.expect("stream");
    let order = serde_json::json!({ "order_id": 1042 });
    let mut tx = db.pool.begin().await.unwrap();
    let id = publish_in(&mut tx, "orders.placed", &order).await.unwrap();
    tx.commit().await.unwrap();

    let mut relay = Command::new(env!("CARGO_BIN_EXE_chaos-relay"))
        .arg(format!("--database-url={}", db.database.url()))
        .arg(format!("--nats-url={}", shared_url()))
        .arg(format!("--subject-prefix={prefix}"))
        .arg("--hang-after-publish")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start chaos-relay");
    let mut line = String::new();
    BufReader::new(relay.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read chaos-relay's stdout");
    assert_eq!(line.trim(), format!("published {id}"));
    relay.kill().expect("SIGKILL chaos-relay");
    relay.wait().expect("reap chaos-relay");

    let (state, attempts): (String, i32) =
        sqlx::query_as("SELECT state, attempts FROM jobs_outbox WHERE id = $1")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((state.as_str(), attempts), ("pending", 0), "never marked");
    assert_eq!(stored_messages(&jetstream, &stream).await.unwrap().len(), 1);

    let ids = Arc::new(Mutex::new(Vec::new()));
    let publisher = Recording {
        inner: NatsPublisher::new(jetstream.clone()).subject_prefix(prefix),
        ids: Arc::clone(&ids),
    };
    let relay = Relay::new(db.pool.clone(), publisher, RelayConfig::default()).unwrap();
    wait_until(
        "the row published by the next relay",
        Duration::from_secs(20),
        &[],
        || async { relay.run_once().await.unwrap().published == 1 },
    )
    .await;

    assert_eq!(
        *ids.lock().unwrap(),
        [id],
        "published again by the next relay"
    );
    let stored = stored_messages(&jetstream, &stream).await.unwrap();
    assert_eq!(stored.len(), 1, "the stream dropped the copy: {stored:?}");
    let message_id: String =
        sqlx::query_scalar("SELECT message_id::text FROM jobs_outbox WHERE id = $1")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(stored[0].message_id, Some(message_id));
    eprintln!(
        "outbox kill: relay SIGKILLed between publish and mark; row {id} published twice, stored once"
    );
    jetstream
        .delete_stream(&stream)
        .await
        .expect("delete stream");
}
