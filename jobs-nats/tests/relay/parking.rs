//! A row no retry can publish is parked at once; the later rows of its topic go on.

use crate::support::{publish_committed, Env};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_larger_than_the_server_accepts_is_parked_and_its_topic_goes_on() {
    let env = Env::new().await;
    let before = env.write(&[("reports", 1)]).await;
    let huge = "x".repeat(2 * 1024 * 1024);
    let parked = publish_committed(&env.pool, "reports", &huge).await;
    let after = env.write(&[("reports", 2)]).await;

    env.relay_until_none_pending("every row dealt with").await;

    let rows = env.rows().await;
    let (_, state, attempts, error) = rows.iter().find(|row| row.0 == parked).unwrap();
    assert_eq!((state.as_str(), *attempts), ("parked", 1), "{rows:?}");
    assert!(
        error.as_deref().unwrap_or_default().contains("max_payload"),
        "{rows:?}"
    );
    let stored = env.stored().await;
    env.assert_stored_in_order(&stored, "reports", &[before[0], after[0]])
        .await;

    let stats = jobs_postgres::admin::stats(&env.pool).await.unwrap();
    assert_eq!((stats.outbox.parked, stats.outbox.unpublished), (1, 0));
    let violations = jobs_postgres::admin::check(&stats, &Default::default());
    assert_eq!(
        violations.iter().map(|v| v.name()).collect::<Vec<_>>(),
        ["outbox_parked"]
    );
    env.finish().await;
}
