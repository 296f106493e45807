//! What reaches the stream in normal operation: only committed events, each once, in order per
//! topic, also with two relays at once.

use std::time::Duration;

use jobs_postgres::outbox::publish_in;

use crate::support::{Counting, Env, RunningRelay};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_transaction_publishes_nothing() {
    let env = Env::new().await;
    let order = serde_json::json!({ "order_id": 1 });
    let mut tx = env.pool.begin().await.unwrap();
    publish_in(&mut tx, "orders.placed", &order).await.unwrap();
    tx.rollback().await.unwrap();
    // A committed event after it, so that the relay is seen to have run past the rolled-back
    // one.
    let committed = env.write(&[("orders.placed", 2)]).await;

    env.relay_until_count("published", 1, "the committed event")
        .await;
    let stored = env.stored().await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(
        stored[0].message_id,
        Some(env.message_id_of(committed[0]).await)
    );
    let payload: serde_json::Value = serde_json::from_str(&stored[0].payload).unwrap();
    assert_eq!(payload, serde_json::json!({ "n": 2 }));
    assert_eq!(
        env.count("pending").await + env.count("parked").await,
        0,
        "the rolled-back row never existed"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_event_is_published_exactly_once_in_order() {
    let env = Env::new().await;
    let mut placed = Vec::new();
    let mut paid = Vec::new();
    for n in 0..30 {
        let topic = if n % 3 == 0 {
            "orders.paid"
        } else {
            "orders.placed"
        };
        let id = env.write(&[(topic, n)]).await[0];
        if n % 3 == 0 { &mut paid } else { &mut placed }.push(id);
    }
    let publisher = Counting::new(env.publisher());
    env.relay_on_until(
        &env.pool,
        publisher.clone(),
        ("pending", 0),
        "every event published",
    )
    .await;

    let stored = env.stored().await;
    assert_eq!(stored.len(), 30, "{stored:?}");
    env.assert_stored_in_order(&stored, "orders.placed", &placed)
        .await;
    env.assert_stored_in_order(&stored, "orders.paid", &paid)
        .await;
    assert!(
        publisher.calls().values().all(|calls| *calls == 1),
        "each row handed to the broker once: {:?}",
        publisher.calls()
    );
    for (id, state, attempts, last_error) in env.rows().await {
        assert_eq!(
            (state.as_str(), attempts, last_error),
            ("published", 1, None),
            "row {id}"
        );
    }
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_at_once_publish_each_row_once() {
    let env = Env::new().await;
    let topics = ["a", "b", "c", "d"];
    let mut ids: Vec<Vec<i64>> = vec![Vec::new(); topics.len()];
    // Written in one statement per 100 rows, so that the relays find plenty at once.
    for chunk in 0..4 {
        let mut tx = env.pool.begin().await.unwrap();
        for n in 0..100 {
            let topic = (chunk * 100 + n) % topics.len();
            ids[topic].push(
                publish_in(&mut tx, topics[topic], &serde_json::json!({ "n": n }))
                    .await
                    .unwrap(),
            );
        }
        tx.commit().await.unwrap();
    }
    let first = Counting::new(env.publisher());
    let second = Counting::new(env.publisher());
    let relays = [
        env.relay(env.pool.clone(), first.clone()),
        env.relay(env.other_pool().await, second.clone()),
    ];
    let running = relays.map(RunningRelay::start);
    env.wait_until_all_published(Duration::from_secs(30)).await;
    for relay in running {
        relay.stop().await;
    }

    let (first, second) = (first.calls(), second.calls());
    eprintln!(
        "rows published by the first relay: {}, by the second: {}",
        first.len(),
        second.len()
    );
    for id in ids.iter().flatten() {
        let calls = first.get(id).unwrap_or(&0) + second.get(id).unwrap_or(&0);
        assert_eq!(calls, 1, "row {id} handed to the broker once in all");
    }
    let stored = env.stored().await;
    assert_eq!(stored.len(), 400);
    for (topic, ids) in topics.iter().zip(&ids) {
        env.assert_stored_in_order(&stored, topic, ids).await;
    }
    env.finish().await;
}
