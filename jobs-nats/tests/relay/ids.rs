//! Message ids: unique beyond one database, so that two databases relaying into one stream lose
//! nothing; and a duplicate acknowledgement checked against what the stream holds.

use crate::support::{another_database, counter, write_to, Env};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_databases_relaying_into_one_stream_lose_nothing() {
    let env = Env::new().await;
    let (_other_database, other_pool) = another_database().await;
    let ours = env
        .write(&[
            ("orders.placed", 0),
            ("orders.placed", 1),
            ("orders.paid", 2),
        ])
        .await;
    let theirs = write_to(
        &other_pool,
        &[
            ("orders.placed", 100),
            ("orders.placed", 101),
            ("orders.placed", 102),
        ],
    )
    .await;
    assert_eq!(
        ours, theirs,
        "both databases are fresh: their row ids are the same"
    );

    env.relay_until_none_pending("our rows published").await;
    env.relay_on_until(
        &other_pool,
        env.publisher(),
        ("pending", 0),
        "their rows dealt with",
    )
    .await;

    let stored = env.stored().await;
    let mut payloads: Vec<i64> = stored
        .iter()
        .map(|message| {
            serde_json::from_str::<serde_json::Value>(&message.payload).unwrap()["n"]
                .as_i64()
                .unwrap()
        })
        .collect();
    payloads.sort_unstable();
    assert_eq!(
        payloads,
        [0, 1, 2, 100, 101, 102],
        "every event of both databases is in the stream: {stored:?}"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_ack_for_another_message_parks_the_row_loudly() {
    let env = Env::new().await;
    let id = env.write(&[("orders.placed", 1)]).await[0];
    let message_id = env.message_id_of(id).await;
    // Another message already in the stream under the id the relay will use.
    env.send_as("orders.other", message_id.clone(), "someone else's".into())
        .await;
    let alarms = counter(jobs_postgres::metrics::OUTBOX_DUPLICATE_IDS_TOTAL);

    env.relay_until_none_pending("the row dealt with").await;

    let rows = env.rows().await;
    let (_, state, attempts, error) = &rows[0];
    assert_eq!((state.as_str(), *attempts), ("parked", 1), "{rows:?}");
    let error = error.as_deref().unwrap_or_default();
    assert!(
        error.contains("duplicate") && error.contains(&message_id),
        "{error}"
    );
    assert_eq!(
        counter(jobs_postgres::metrics::OUTBOX_DUPLICATE_IDS_TOTAL) - alarms,
        1,
        "counted"
    );
    let stored = env.stored().await;
    assert_eq!(stored.len(), 1, "only the other message: {stored:?}");
    assert_eq!(stored[0].payload, "someone else's");

    // Parked under a new id: a replay publishes it, within the stream's duplicate window.
    let new_message_id = env.message_id_of(id).await;
    assert_ne!(new_message_id, message_id, "the parked row drew a new id");
    let replayed = jobs_postgres::admin::replay_parked(&env.pool, Some(&[id]))
        .await
        .unwrap();
    assert_eq!(replayed, [id]);
    env.relay_until_count("published", 1, "the replayed row published")
        .await;
    assert_eq!(env.stored().await.len(), 2, "the row's own message too");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_the_stream_already_holds_is_marked_published_without_a_copy() {
    let env = Env::new().await;
    let id = env.write(&[("orders.placed", 1)]).await[0];
    // What a relay that crashed after the broker's acknowledgement and before marking the row
    // published left in the stream: this very row, under its own message id.
    let payload: String = sqlx::query_scalar("SELECT payload::text FROM jobs_outbox WHERE id = $1")
        .bind(id)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    env.send_as("orders.placed", env.message_id_of(id).await, payload)
        .await;
    env.relay_until_none_pending("the row dealt with").await;

    assert_eq!(
        env.rows().await,
        [(id, "published".to_owned(), 1, None)],
        "no alarm for the relay's own earlier publish"
    );
    assert_eq!(env.stored().await.len(), 1, "the stream kept one message");
    env.finish().await;
}
