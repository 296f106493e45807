//! A per-key limited claim in turn order runs as a statement of its own, without waiting for
//! the kind's lock: it claims only when it had the kind to itself, and never counts the running
//! jobs from a snapshot that misses another claim. Nor does a claim in a transaction, per-key or
//! kind-wide, whatever the connection's default isolation.

use std::time::Duration;

use jobs::postgres::__private::sql;
use jobs::postgres::__private::store::{
    claim_key_limited, claim_limited, ClaimCount, ClaimLimits, KeyRound,
};
use jobs::RateLimit;
use sqlx::{Connection, PgConnection, Row};

use crate::support::Db;

/// How a claim of a version before migration 24 takes kind `$1`'s lock: without counting itself.
const OLDER_VERSION_LOCK: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('jobs_max_running:' || $1, 0))";

/// Ready `per_merchant` jobs: two of merchant a, one of b, in that order.
async fn two_merchants() -> (Db, [i64; 3]) {
    let db = Db::new().await;
    db.insert_keyed("per_merchant", "limit_key", "{}", &["a", "a", "b"])
        .await;
    let ids: Vec<i64> = db.column("SELECT id FROM jobs_queue ORDER BY id").await;
    (db, [ids[0], ids[1], ids[2]])
}

/// Starts job `id` in `transaction`, as a claim does (running, leased).
async fn start_in(transaction: &mut PgConnection, id: i64) {
    sqlx::query(
        "UPDATE jobs_queue SET state = 'running', attempts = attempts + 1,
                lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 hour',
                attempted_at = now()
         WHERE id = $1",
    )
    .bind(id)
    .execute(transaction)
    .await
    .unwrap();
}

/// [`sql::CLAIM_KEY_TURNS`] as a statement of its own, for up to `wanted` `per_merchant` jobs
/// with at most one running per merchant: whether it had the kind to itself, and the ids it
/// took.
async fn claim_by_turns_alone(conn: &mut PgConnection, wanted: i64) -> (bool, Vec<i64>) {
    let (sole, ids, _) = claim_by_turns_alone_with_stop(conn, wanted).await;
    (sole, ids)
}

/// [`claim_by_turns_alone`], with whether it left a job it read for want of room
/// (`stopped_at_limit`).
async fn claim_by_turns_alone_with_stop(
    conn: &mut PgConnection,
    wanted: i64,
) -> (bool, Vec<i64>, bool) {
    let rows = sqlx::query(sql::CLAIM_KEY_TURNS)
        .bind("per_merchant")
        .bind("default")
        .bind(wanted)
        .bind(None::<i64>)
        .bind(30.0_f64)
        .bind(None::<i32>)
        .bind(None::<f64>)
        .bind(1_i64)
        .bind(wanted)
        .fetch_all(conn)
        .await
        .unwrap();
    let ids = rows
        .iter()
        .filter_map(|row| row.get::<Option<i64>, _>("id"))
        .collect();
    (rows[0].get("sole"), ids, rows[0].get("stopped_at_limit"))
}

/// At most one `per_merchant` job running per merchant, and no other limit.
fn one_per_merchant() -> ClaimLimits {
    ClaimLimits {
        max_running: None,
        rate_limit: None,
        max_running_per_key: Some(1),
        rate_limit_per_key: None,
    }
}

/// The ready jobs, by id.
async fn ready(db: &Db) -> Vec<i64> {
    db.column("SELECT id FROM jobs_queue WHERE state = 'ready' ORDER BY id")
        .await
}

/// Waits until a statement of the test's database waits for a lock.
async fn wait_for_a_lock_wait(db: &Db) {
    db.wait_for_count_at_least(
        "the claim to wait for a lock",
        "SELECT count(*) FROM pg_stat_activity
         WHERE wait_event_type = 'Lock' AND datname = current_database()",
        1,
    )
    .await;
}

/// A claim that commits after the statement's snapshot was taken, while the statement waits to
/// count its own claim: the statement would count merchant a's running jobs without it, and take
/// a's second job past a's limit of 1. It takes nothing, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_its_own_takes_nothing_when_another_committed_after_its_snapshot() {
    let (db, [a1, a2, b1]) = two_merchants().await;
    // Another claim, as a worker makes it: it counts itself, and starts a's first job.
    let mut other = PgConnection::connect(db.url()).await.unwrap();
    let mut other_claim = other.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO jobs_limited_claims AS counted (kind, claims) VALUES ('per_merchant', 1)
         ON CONFLICT (kind) DO UPDATE SET claims = counted.claims + 1",
    )
    .execute(&mut *other_claim)
    .await
    .unwrap();
    start_in(&mut other_claim, a1).await;

    let url = db.url().to_owned();
    let claim = tokio::spawn(async move {
        let mut conn = PgConnection::connect(&url).await.unwrap();
        claim_by_turns_alone(&mut conn, 4).await
    });
    wait_for_a_lock_wait(&db).await;
    other_claim.commit().await.unwrap();

    assert_eq!(claim.await.unwrap(), (false, vec![]));
    assert_eq!(ready(&db).await, [a2, b1]);
}

/// A worker of a version that does not count its claims holds the kind's advisory lock while it
/// claims: a claim of its own takes nothing then, and the worker's claim waits for the lock and
/// counts what that claim started (merchant a at its limit of 1: only b's job is taken).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_its_own_takes_nothing_while_another_holds_the_kind_lock() {
    let (db, [a1, a2, b1]) = two_merchants().await;
    let mut other = PgConnection::connect(db.url()).await.unwrap();
    let mut other_claim = other.begin().await.unwrap();
    sqlx::query(OLDER_VERSION_LOCK)
        .bind("per_merchant")
        .execute(&mut *other_claim)
        .await
        .unwrap();
    start_in(&mut other_claim, a1).await;

    let mut conn = PgConnection::connect(db.url()).await.unwrap();
    assert_eq!(claim_by_turns_alone(&mut conn, 4).await, (false, vec![]));

    let claim =
        tokio::spawn(async move { claim_in_a_transaction(&mut conn, LimitOf::EachMerchant).await });
    wait_for_a_lock_wait(&db).await;
    other_claim.commit().await.unwrap();

    assert_eq!(claim.await.unwrap().unwrap(), [b1]);
    assert_eq!(ready(&db).await, [a2]);
}

/// A connection to `db` whose transactions default to `isolation`, as when the database or role
/// sets `default_transaction_isolation`.
async fn connection_defaulting_to(db: &Db, isolation: &str) -> PgConnection {
    let mut conn = PgConnection::connect(db.url()).await.unwrap();
    sqlx::query(&format!(
        "SET default_transaction_isolation = '{isolation}'"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let set: String = sqlx::query_scalar("SELECT current_setting('transaction_isolation')")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(set, isolation);
    conn
}

/// The limits of a claim of `per_merchant` in a transaction: at most one job running per
/// merchant, or one of the kind in all.
#[derive(Debug, Clone, Copy)]
enum LimitOf {
    EachMerchant,
    TheKind,
}

/// A claim in a transaction, after the kind's lock, of up to 4 `per_merchant` jobs from queue
/// `default` under `limit`: the ids it took.
async fn claim_in_a_transaction(
    conn: &mut PgConnection,
    limit: LimitOf,
) -> Result<Vec<i64>, sqlx::Error> {
    let lease = Duration::from_secs(30);
    let claim = match limit {
        LimitOf::EachMerchant => {
            let mut round = KeyRound::new(Duration::from_secs(3600));
            let count = ClaimCount { free: 4, ahead: 0 };
            let limits = one_per_merchant();
            claim_key_limited(
                conn,
                "per_merchant",
                "default",
                count,
                limits,
                lease,
                &mut round,
            )
            .await?
        }
        LimitOf::TheKind => {
            let queues = ["default".to_string()];
            claim_limited(conn, "per_merchant", &queues, 4, Some(1), None, lease).await?
        }
    };
    Ok(claim.jobs.iter().map(|job| job.id).collect())
}

/// A claim in a transaction counts the running jobs once it holds the kind's lock, whatever the
/// default isolation (`REPEATABLE READ` and `SERIALIZABLE` here). Under `REPEATABLE READ` the
/// transaction would read from the snapshot of
/// its lock statement, taken before the wait: after a claim that counts itself, its own count
/// would fail (a serialization error, at every claim that waited); after a claim of a version
/// that does not count itself (holding the lock alone), it would count the running jobs without
/// merchant a's that claim started meanwhile (in another queue, so this claim does not meet its
/// row), and take a's job past a's limit of 1, or past the kind's. It takes b's job alone under
/// the per-key limit, and nothing under the kind's, after either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_in_a_transaction_counts_what_started_while_it_waited_whatever_the_isolation() {
    let counting = ("a claim that counts itself", sql::LOCK_LIMITED_KIND);
    let not_counting = (
        "a claim of a version that does not count itself",
        OLDER_VERSION_LOCK,
    );
    for isolation in ["repeatable read", "serializable"] {
        for limit in [LimitOf::EachMerchant, LimitOf::TheKind] {
            for other in [counting, not_counting] {
                claim_while_another_starts_a_job(isolation, limit, other).await;
            }
        }
    }
}

/// Another claim, `other` (its name, and the statement it takes the kind's lock with), starts
/// merchant a's job in another queue while a claim in a transaction under `limit`, on a
/// connection defaulting to `isolation`, waits for the lock: the claim takes b's job alone under
/// the per-key limit, and nothing under the kind's.
async fn claim_while_another_starts_a_job(isolation: &str, limit: LimitOf, other: (&str, &str)) {
    let (other, other_lock) = other;
    let (db, [a1, a2, b1]) = two_merchants().await;
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, limit_key)
         VALUES ('per_merchant', 'other', '{}', 8, 'a')",
    )
    .await;
    let a_elsewhere: i64 = db
        .column("SELECT id FROM jobs_queue WHERE queue = 'other'")
        .await[0];
    let mut other_connection = PgConnection::connect(db.url()).await.unwrap();
    let mut other_claim = other_connection.begin().await.unwrap();
    sqlx::query(other_lock)
        .bind("per_merchant")
        .execute(&mut *other_claim)
        .await
        .unwrap();
    start_in(&mut other_claim, a_elsewhere).await;

    let mut conn = connection_defaulting_to(&db, isolation).await;
    let claim = tokio::spawn(async move { claim_in_a_transaction(&mut conn, limit).await });
    wait_for_a_lock_wait(&db).await;
    other_claim.commit().await.unwrap();

    let taken = claim.await.unwrap();
    let (expected, left_ready) = match limit {
        LimitOf::EachMerchant => (vec![b1], vec![a1, a2]),
        LimitOf::TheKind => (vec![], vec![a1, a2, b1]),
    };
    assert_eq!(
        taken.as_ref().ok(),
        Some(&expected),
        "{isolation}, {limit:?}, after {other}: {taken:?}"
    );
    assert_eq!(ready(&db).await, left_ready);
}

/// How many times claims of `per_merchant` counted themselves.
async fn claims_counted(db: &Db) -> Vec<i64> {
    db.column("SELECT claims FROM jobs_limited_claims WHERE kind = 'per_merchant'")
        .await
}

/// A claim in a transaction (here one that walks the keys, under a per-key rate limit) counts
/// itself as a statement of its own does: a statement of its own whose snapshot missed it would
/// see the count differ.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_in_a_transaction_counts_itself_too() {
    let (db, [a1, a2, b1]) = two_merchants().await;
    let mut conn = PgConnection::connect(db.url()).await.unwrap();
    let mut round = KeyRound::new(Duration::from_secs(3600));
    let one_each = one_per_merchant();
    let walking = ClaimLimits {
        rate_limit_per_key: Some(RateLimit::new(1000, Duration::from_secs(1)).unwrap()),
        ..one_each
    };
    let count = ClaimCount { free: 1, ahead: 0 };
    let lease = Duration::from_secs(30);
    let alone = claim_key_limited(
        &mut conn,
        "per_merchant",
        "default",
        count,
        one_each,
        lease,
        &mut round,
    )
    .await
    .unwrap();
    assert_eq!(alone.jobs[0].id, a1);
    assert_eq!(claims_counted(&db).await, [1]);
    let in_transaction = claim_key_limited(
        &mut conn,
        "per_merchant",
        "default",
        count,
        walking,
        lease,
        &mut round,
    )
    .await
    .unwrap();
    assert!(in_transaction.walked_keys);
    assert_eq!(in_transaction.jobs[0].id, b1);
    assert_eq!(claims_counted(&db).await, [2]);
    assert_eq!(ready(&db).await, [a2]);
}

/// With the kind to itself, the statement claims, and counts its claim: for two jobs, it reads
/// a1 and b1, each merchant's first, and takes both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_its_own_with_the_kind_to_itself_claims_and_counts_itself() {
    let (db, [a1, a2, b1]) = two_merchants().await;
    let mut conn = PgConnection::connect(db.url()).await.unwrap();
    assert_eq!(
        claim_by_turns_alone(&mut conn, 2).await,
        (true, vec![a1, b1])
    );
    assert_eq!(ready(&db).await, [a2]);
    assert_eq!(claims_counted(&db).await, [1]);
}

/// For four jobs, the statement of its own that takes all it read or none reads a1, b1 and a2,
/// and merchant a's limit of 1 has no room for a2: it takes none of them, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_its_own_takes_none_of_the_jobs_read_when_a_key_has_no_room_for_all() {
    let (db, [a1, a2, b1]) = two_merchants().await;
    let mut conn = PgConnection::connect(db.url()).await.unwrap();
    assert_eq!(
        claim_by_turns_alone_with_stop(&mut conn, 4).await,
        (true, vec![], true)
    );
    assert_eq!(ready(&db).await, [a1, a2, b1]);
}

/// A claim of `count` by [`claim_key_limited`], at most one `per_merchant` job running per
/// merchant, with a new round: the ids it took, and whether it walked the keys.
async fn claim_with_one_per_merchant(
    conn: &mut PgConnection,
    count: ClaimCount,
) -> (Vec<i64>, bool) {
    let claimed = claim_key_limited(
        conn,
        "per_merchant",
        "default",
        count,
        one_per_merchant(),
        Duration::from_secs(30),
        &mut KeyRound::new(Duration::from_secs(1)),
    )
    .await
    .unwrap();
    let taken = claimed.jobs.iter().map(|job| job.id).collect();
    (taken, claimed.walked_keys)
}

/// A claim whose read of a1, b1 and a2 does not fit merchant a's limit of 1 takes the jobs
/// before a2 by a second statement of its own, up to the first job without room: for two free
/// slots, and for jobs ahead alone (where a statement that took none would have been the whole
/// claim), that is the whole claim, without a transaction or a walk of the keys. It counted
/// itself twice (each statement).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_read_does_not_fit_takes_the_jobs_before_the_first_without_room() {
    for count in [
        ClaimCount { free: 2, ahead: 2 },
        ClaimCount { free: 0, ahead: 4 },
    ] {
        let (db, [a1, a2, b1]) = two_merchants().await;
        let mut conn = PgConnection::connect(db.url()).await.unwrap();
        let claimed = claim_with_one_per_merchant(&mut conn, count).await;
        assert_eq!(claimed, (vec![a1, b1], false), "{count:?}");
        assert_eq!(ready(&db).await, [a2], "{count:?}");
        assert_eq!(claims_counted(&db).await, [2], "{count:?}");
    }
}
