//! Input PostgreSQL cannot store, or a worker could never decode, is refused at enqueue with a
//! typed error before anything reaches the connection: the caller's transaction goes on and
//! commits its other rows.

use std::time::{Duration, SystemTime};

use jobs::{job, EncodeError, EnqueueError, Enqueued, JobResult, NameError};
use serde_json::{json, Value};
use sqlx::PgConnection;

use crate::support::Db;

/// Carries any JSON value.
#[job]
pub async fn carries_value(value: Value) -> JobResult {
    let _ = value;
    Ok(())
}

/// Deduplicated on a note, which may be long free text.
#[job(dedupe = "note:<note>")]
pub async fn keyed_note(note: String) -> JobResult {
    let _ = note;
    Ok(())
}

/// Deduplicated on two fields of any JSON type, separated by a colon.
#[job(dedupe = "<a>:<b>")]
pub async fn keyed_pair(a: Value, b: Value) -> JobResult {
    let _ = (a, b);
    Ok(())
}

/// Deduplicated on an optional field.
#[job(dedupe = "user:<user>")]
pub async fn keyed_optional(user: Option<String>) -> JobResult {
    let _ = user;
    Ok(())
}

/// A database with an `orders` table standing for the caller's business rows.
async fn db_with_orders() -> Db {
    let db = Db::new().await;
    db.execute("CREATE TABLE orders (id bigint PRIMARY KEY)")
        .await;
    db
}

/// Inserts order `id`, a business row of the caller's.
async fn insert_order(conn: &mut PgConnection, id: i64) {
    sqlx::query("INSERT INTO orders (id) VALUES ($1)")
        .bind(id)
        .execute(conn)
        .await
        .unwrap();
}

/// Runs `enqueue` in the caller's transaction, between two of its orders: the enqueue must be
/// refused, and the transaction must go on and commit both orders and no job (the orders are
/// cleared after the check). Returns the refusal.
async fn refused_in_a_transaction<T: std::fmt::Debug>(
    db: &Db,
    enqueue: impl AsyncFnOnce(&mut PgConnection) -> Result<T, EnqueueError>,
) -> EnqueueError {
    let mut tx = db.pool.begin().await.unwrap();
    insert_order(&mut tx, 1).await;
    let error = enqueue(&mut tx).await.expect_err("refused");
    insert_order(&mut tx, 2).await;
    tx.commit().await.unwrap();
    assert_eq!(db.count("SELECT count(*) FROM orders").await, 2);
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue").await, 0);
    db.execute("TRUNCATE orders").await;
    error
}

/// A JSON value nested `depth` arrays deep around a number, built without recursion.
fn nested(depth: usize) -> Value {
    let mut value = json!(0);
    for _ in 0..depth {
        value = Value::Array(vec![value]);
    }
    value
}

/// Drops a deeply nested value without recursion.
fn dismantle(value: Value) {
    let mut stack = vec![value];
    while let Some(mut value) = stack.pop() {
        match &mut value {
            Value::Array(items) => stack.append(items),
            Value::Object(map) => stack.extend(std::mem::take(map).into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

/// `len` characters a compressor cannot shrink much, so that an index entry holding them would
/// pass the btree row limit (about 2.7 kB) even compressed.
fn incompressible_text(len: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@./:-_";
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from(ALPHABET[(state % ALPHABET.len() as u64) as usize])
        })
        .collect()
}

/// The field a refusal for U+0000 names.
fn nul_field(error: &EnqueueError) -> &str {
    match error {
        EnqueueError::Encode(EncodeError::NulCharacter { field, .. }) => field,
        other => panic!("expected a refusal for U+0000, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_character_in_a_payload_string_is_refused_and_the_transaction_commits() {
    let db = db_with_orders().await;
    let error = refused_in_a_transaction(&db, async |conn| {
        carries_value::enqueue_in(conn, json!({"note": "a\u{0}b"})).await
    })
    .await;
    assert_eq!(nul_field(&error), "payload.value.note");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_character_in_a_payload_key_is_refused_and_the_transaction_commits() {
    let db = db_with_orders().await;
    let error = refused_in_a_transaction(&db, async |conn| {
        carries_value::enqueue_in(conn, json!({"a\u{0}b": 1})).await
    })
    .await;
    assert_eq!(nul_field(&error), "payload.value.a\\0b (key)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_character_in_a_dedupe_key_is_refused_and_the_transaction_commits() {
    let db = db_with_orders().await;
    let mut job = jobs::NewJob::of::<keyed_note::Job>(&keyed_note::Args {
        note: "plain".into(),
    })
    .unwrap();
    job.dedupe_key = Some("note:\u{0}".into());
    let error = refused_in_a_transaction(&db, async |conn| {
        jobs::postgres::enqueue_job(conn, &job).await
    })
    .await;
    assert_eq!(nul_field(&error), "dedupe_key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_or_run_at_beyond_what_postgres_stores_is_refused_and_the_transaction_commits() {
    let db = db_with_orders().await;
    let error = refused_in_a_transaction(&db, async |conn| {
        let delayed = carries_value::builder(json!(1)).delay(Duration::MAX);
        delayed.enqueue_in(conn).await
    })
    .await;
    assert!(
        matches!(
            error,
            EnqueueError::Encode(EncodeError::RunAtOutOfRange {
                kind: "carries_value"
            })
        ),
        "{error:?}"
    );
    let far = SystemTime::UNIX_EPOCH + Duration::from_secs(400_000 * 365 * 86_400);
    let error = refused_in_a_transaction(&db, async |conn| {
        carries_value::builder(json!(1))
            .run_at(far)
            .enqueue_in(conn)
            .await
    })
    .await;
    assert!(
        matches!(
            error,
            EnqueueError::Encode(EncodeError::RunAtOutOfRange { .. })
        ),
        "{error:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_name_breaking_the_name_rules_is_refused_and_the_transaction_commits() {
    let db = db_with_orders().await;
    let error = refused_in_a_transaction(&db, async |conn| {
        let long_queue = carries_value::builder(json!(1)).queue("q".repeat(8000));
        long_queue.enqueue_in(conn).await
    })
    .await;
    assert!(
        matches!(
            error,
            EnqueueError::Encode(EncodeError::QueueName {
                source: NameError::TooLong { len: 8000, .. },
                ..
            })
        ),
        "{error:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_enqueue_with_one_bad_job_is_refused_whole_and_the_transaction_commits() {
    let db = db_with_orders().await;
    let error = refused_in_a_transaction(&db, async |conn| {
        let args = [json!({"ok": 1}), json!({"bad": "\u{0}"})]
            .into_iter()
            .map(|value| carries_value::Args { value });
        carries_value::enqueue_many_in(conn, args).await
    })
    .await;
    assert_eq!(nul_field(&error), "payload.value.bad");
    let error = refused_in_a_transaction(&db, async |conn| {
        let args = ["fine", "a\u{0}"]
            .into_iter()
            .map(|note| keyed_note::Args { note: note.into() });
        keyed_note::enqueue_many_in(conn, args).await
    })
    .await;
    assert_eq!(nul_field(&error), "payload.note");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_nested_deeper_than_the_decoder_reads_is_refused_and_the_transaction_commits() {
    let db = db_with_orders().await;
    let error = refused_in_a_transaction(&db, async |conn| {
        carries_value::enqueue_in(conn, nested(200)).await
    })
    .await;
    assert!(
        matches!(
            error,
            EnqueueError::Encode(EncodeError::TooDeep { limit: 127, .. })
        ),
        "{error:?}"
    );
}

#[test]
fn a_payload_ten_thousand_levels_deep_is_refused_without_exhausting_the_stack() {
    // A thread with a small stack, as a tokio worker has: serializing such a value recursively
    // would overflow it and abort the process.
    std::thread::Builder::new()
        .stack_size(512 * 1024)
        .spawn(|| {
            let args = carries_value::Args {
                value: nested(10_000),
            };
            let result = jobs::NewJob::of::<carries_value::Job>(&args);
            assert!(
                matches!(result, Err(EncodeError::TooDeep { limit: 127, .. })),
                "{result:?}"
            );
            dismantle(args.value);
        })
        .unwrap()
        .join()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dedupe_key_longer_than_an_index_row_works_and_dedupes() {
    let db = db_with_orders().await;
    let note = incompressible_text(10_000);
    let mut tx = db.pool.begin().await.unwrap();
    insert_order(&mut tx, 1).await;
    let first = keyed_note::enqueue_in(&mut tx, note.clone()).await.unwrap();
    let second = keyed_note::enqueue_in(&mut tx, note.clone()).await.unwrap();
    tx.commit().await.unwrap();
    assert!(first.is_new());
    assert_eq!(second, Enqueued::Duplicate(first.id()));
    let bulk = keyed_note::enqueue_many(
        &db.pool,
        [note.clone(), format!("{note}!")].map(|note| keyed_note::Args { note }),
    )
    .await
    .unwrap();
    assert_eq!(bulk[0], Enqueued::Duplicate(first.id()));
    assert!(bulk[1].is_new());
    let stored: String = db.job_value(first.id(), "dedupe_key").await;
    assert!(stored.contains(&note), "the key itself is kept in the row");
    assert_eq!(db.count("SELECT count(*) FROM orders").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_that_used_to_render_the_same_dedupe_key_are_distinct_jobs() {
    let db = Db::new().await;
    let pairs = [
        (json!("x:y"), json!("z")),
        (json!("x"), json!("y:z")),
        (json!("1042"), json!(1)),
        (json!(1042), json!(1)),
        (json!(null), json!(1)),
        (json!("null"), json!(1)),
    ];
    for (a, b) in pairs {
        let enqueued = keyed_pair::enqueue(&db.pool, a.clone(), b.clone())
            .await
            .unwrap();
        assert!(enqueued.is_new(), "{a} and {b}: {enqueued:?}");
    }
    let none = keyed_optional::enqueue(&db.pool, None).await.unwrap();
    let null = keyed_optional::enqueue(&db.pool, Some("null".into()))
        .await
        .unwrap();
    assert!(none.is_new() && null.is_new(), "{none:?} {null:?}");
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue").await, 8);
}
