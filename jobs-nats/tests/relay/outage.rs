//! The broker down for 10 s: rows wait, with their attempts and last error recorded, then all
//! arrive, in order, none lost, none twice.

use std::time::Duration;

use jobs_nats::testing::NatsServer;

use crate::support::{wait_until, Env, RunningRelay};

/// How long the broker is down.
const OUTAGE: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_written_while_the_broker_is_down_wait_then_all_arrive_in_order() {
    let mut server = NatsServer::start()
        .await
        .expect("start a private nats-server");
    let env = Env::on(&server.url()).await;
    let running = RunningRelay::start(env.relay(env.pool.clone(), env.publisher()));

    let mut ids = env.write(&[("payments", 0), ("payments", 1)]).await;
    wait_until(
        "the first events published",
        Duration::from_secs(20),
        || async { env.count("published").await == 2 },
    )
    .await;

    server.kill().await.expect("kill nats-server");
    for n in 2..40 {
        ids.extend(env.write(&[("payments", n)]).await);
    }
    wait_until(
        "a failed attempt recorded",
        Duration::from_secs(20),
        || async {
            env.rows()
                .await
                .iter()
                .any(|(_, _, attempts, error)| *attempts > 0 && error.is_some())
        },
    )
    .await;
    // The outage itself: a deliberate wait, not a wait for a condition.
    tokio::time::sleep(OUTAGE).await;
    assert_eq!(
        env.count("published").await,
        2,
        "nothing published while down"
    );
    assert_eq!(env.count("parked").await, 0, "nothing parked");
    let waiting = env.rows().await;
    let (_, _, attempts, last_error) = &waiting[2];
    assert!(*attempts >= 2, "the head row kept retrying: {waiting:?}");
    assert!(last_error.is_some(), "{waiting:?}");
    assert!(
        waiting[3..]
            .iter()
            .all(|(_, _, attempts, _)| *attempts == 0),
        "later rows of the topic waited behind the head, untried: {waiting:?}"
    );

    server.restart().await.expect("restart nats-server");
    env.wait_until_all_published(Duration::from_secs(60)).await;
    running.stop().await;

    let stored = env.stored().await;
    assert_eq!(stored.len(), 40, "none lost, none twice");
    env.assert_stored_in_order(&stored, "payments", &ids).await;
    assert_eq!(env.count("parked").await, 0);
    env.finish().await;
}
