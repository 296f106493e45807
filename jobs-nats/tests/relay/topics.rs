//! The publisher checks topics again before they reach the NATS protocol: a bad one is a
//! permanent error, and nothing is sent.

use jobs_postgres::outbox::{OutboxMessage, Publisher, Retry};

use crate::support::Env;

/// Row 1's first attempt to publish an empty object to `topic`.
fn first_attempt_of(topic: &str) -> OutboxMessage {
    OutboxMessage {
        id: 1,
        message_id: uuid::Uuid::new_v4(),
        topic: topic.to_owned(),
        payload: "{}".to_owned(),
        attempt: 1,
        created_at: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_publisher_refuses_a_bad_topic_permanently_and_sends_nothing() {
    let env = Env::new().await;
    let publisher = env.publisher();
    for topic in [
        "",
        "orders placed",
        "orders.placed\r\nPUB orders.other 2",
        "orders.\t",
        "orders..placed",
        "orders.*",
        "orders.>",
    ] {
        let message = first_attempt_of(topic);
        let error = publisher
            .publish(&message)
            .await
            .expect_err(&format!("{topic:?} refused"));
        assert_eq!(error.retry(), Retry::Permanent, "{topic:?}: {error}");
    }
    assert_eq!(env.stored().await, [], "nothing reached the stream");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_subject_prefix_fails_every_publish_as_retryable_and_sends_nothing() {
    let env = Env::new().await;
    let publisher = jobs_nats::NatsPublisher::new(env.jetstream.clone())
        .subject_prefix(format!("{}orders placed.", env.prefix));
    let message = first_attempt_of("orders.placed");
    let error = publisher.publish(&message).await.unwrap_err();
    assert_eq!(error.retry(), Retry::Retryable, "{error}");
    assert!(error.message().contains("subject prefix"), "{error}");
    assert_eq!(env.stored().await, [], "nothing reached the stream");
    env.finish().await;
}
