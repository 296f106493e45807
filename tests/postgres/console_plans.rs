//! The plans of every statement the web console's pages and controls run, on a table of a
//! million retained rows of many kinds (and an outbox of a hundred thousand published rows):
//! each reads through an index, never the whole table.

use jobs::postgres::__private::sql;
use serde_json::Value;

use crate::plans::{assert_no_seq_scan, explain, plan_nodes, plan_of, scans_of};
use crate::support::Db;

/// Dead-letter filters as the console binds them: (label, ids, kind, queue).
type DeadFilter = (
    &'static str,
    Option<Vec<i64>>,
    Option<&'static str>,
    Option<&'static str>,
);

fn dead_filters() -> Vec<DeadFilter> {
    vec![
        ("every dead job", None, None, None),
        ("one kind", None, Some("kind_7"), None),
        ("one queue", None, None, Some("queue_3")),
        ("kind and queue", None, Some("kind_7"), Some("queue_3")),
        ("selected ids", Some(vec![1_000_001, 1_000_002]), None, None),
    ]
}

/// `text` with a dead-letter filter bound as `$1`..`$4` (no age).
fn dead_query<'q>(
    text: &'q str,
    ids: Option<Vec<i64>>,
    kind: Option<&'static str>,
    queue: Option<&'static str>,
) -> sqlx::query::QueryScalar<'q, sqlx::Postgres, Value, sqlx::postgres::PgArguments> {
    sqlx::query_scalar(text)
        .bind(ids)
        .bind(kind)
        .bind(queue)
        .bind(None::<f64>)
}

/// Asserts that the plan `explain` (bound) reads `table` through indexes only.
async fn assert_indexed(
    db: &Db,
    name: &str,
    table: &str,
    query: sqlx::query::QueryScalar<'_, sqlx::Postgres, Value, sqlx::postgres::PgArguments>,
) {
    let plan = plan_of(db, name, query).await;
    let scans = scans_of(&plan_nodes(&plan), table);
    assert!(!scans.is_empty(), "{name} reads {table}");
    assert_no_seq_scan(&scans, name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_console_statement_reads_through_an_index_on_a_million_retained_rows() {
    let db = Db::new().await;
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, finished_at)
         SELECT 'kind_' || (n % 50), 'queue_' || (n % 5), '{}'::jsonb,
                CASE WHEN n % 10 = 0 THEN 'cancelled' ELSE 'done' END, 1, 8, now()
         FROM generate_series(1, 1000000) AS n;
         INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, finished_at)
         SELECT 'kind_' || (n % 50), 'queue_' || (n % 5), '{}'::jsonb, 'dead', 8, 8, now()
         FROM generate_series(1, 2000) AS n;
         INSERT INTO jobs_outbox (topic, payload, state, published_at)
         SELECT 'orders', '{}'::jsonb, 'published', now() FROM generate_series(1, 100000);
         INSERT INTO jobs_outbox (topic, payload, state, attempts, parked_at, last_error)
         SELECT 'orders', '{}'::jsonb, 'parked', 5, now(), 'refused' FROM generate_series(1, 20);
         ANALYZE jobs_queue; ANALYZE jobs_outbox;",
    )
    .await;

    for (label, ids, kind, queue) in dead_filters() {
        let count = explain(sql::COUNT_DEAD);
        let query = dead_query(&count, ids.clone(), kind, queue);
        assert_indexed(&db, &format!("COUNT_DEAD, {label}"), "jobs_queue", query).await;
        for (name, statement) in [
            ("LIST_DEAD", sql::LIST_DEAD),
            ("PREVIEW_REPLAY_DEAD", sql::PREVIEW_REPLAY_DEAD),
            ("PREVIEW_DISCARD_DEAD", sql::PREVIEW_DISCARD_DEAD),
            ("REPLAY_DEAD", sql::REPLAY_DEAD),
            ("DISCARD_DEAD", sql::DISCARD_DEAD),
        ] {
            let text = explain(statement);
            let query = dead_query(&text, ids.clone(), kind, queue)
                .bind(0_i64)
                .bind(1_000_i64);
            assert_indexed(&db, &format!("{name}, {label}"), "jobs_queue", query).await;
        }
    }

    let details = explain(sql::JOB_DETAILS);
    assert_indexed(
        &db,
        "JOB_DETAILS",
        "jobs_queue",
        sqlx::query_scalar(&details).bind(500_000_i64),
    )
    .await;

    let parked = explain(sql::LIST_PARKED);
    assert_indexed(
        &db,
        "LIST_PARKED",
        "jobs_outbox",
        sqlx::query_scalar(&parked)
            .bind(0_i64)
            .bind(100_i64)
            .bind(None::<String>),
    )
    .await;
    for (name, statement) in [
        ("PREVIEW_REPLAY_PARKED", sql::PREVIEW_REPLAY_PARKED),
        ("REPLAY_PARKED", sql::REPLAY_PARKED),
    ] {
        let text = explain(statement);
        let query = sqlx::query_scalar(&text)
            .bind(None::<Vec<i64>>)
            .bind(0_i64)
            .bind(1_000_i64);
        assert_indexed(&db, name, "jobs_outbox", query).await;
    }
}
