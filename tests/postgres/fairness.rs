//! Fair share: the jobs of a kind with a fairness key are claimed round-robin across their keys,
//! so that one key's flood delays another key's jobs by about one round, while a key alone still
//! takes every free slot.

use jobs::postgres::__private::store::{
    claim_fair, record_outcomes, ClaimCount, ClaimedJob, FairPlace, Outcome,
};
use jobs::{
    job, AttemptError, Decision, EncodeError, EnqueueError, JobResult, RegistryError, Worker,
    WorkerError, MAX_KEY_BYTES,
};
use sqlx::PgConnection;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::support::{fast_config, refusal, start_worker, Db};
use crate::test_jobs::tenant_task;

/// A daily report per tenant, deduplicated per tenant and day, claimed fairly across tenants.
#[job(dedupe = "report:<tenant>:<day>", fair_key = "<tenant>")]
pub async fn tenant_report(tenant: String, day: u32) -> JobResult {
    let _ = (tenant, day);
    Ok(())
}

/// The runs of [`tenant_run`], in the order they started: each one's tenant and when it started.
static TENANT_RUNS: Mutex<Vec<(String, Instant)>> = Mutex::new(Vec::new());

/// Notes its start in [`TENANT_RUNS`]; its jobs are claimed round-robin across tenants. (The
/// rows' `attempted_at` is when a job was claimed, which for the jobs claimed ahead of the free
/// slots comes before they start.)
#[job(fair_key = "tenant:<tenant>")]
pub async fn tenant_run(tenant: String, n: u32) -> JobResult {
    let _ = n;
    TENANT_RUNS
        .lock()
        .expect("no run panicked holding it")
        .push((tenant, Instant::now()));
    Ok(())
}

/// Enqueues `count` [`tenant_run`] jobs of `tenant`, 10,000 per statement.
async fn enqueue_tenant_runs(db: &Db, tenant: &str, count: u32) {
    for first in (0..count).step_by(10_000) {
        let chunk = (first..count.min(first + 10_000)).map(|n| tenant_run::Args {
            tenant: tenant.to_owned(),
            n,
        });
        tenant_run::enqueue_many(&db.pool, chunk)
            .await
            .expect("enqueue tenant_run jobs");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_one_tenant_delays_another_tenants_jobs_by_about_one_round() {
    const CONCURRENCY: usize = 8;
    let db = Db::new().await;
    enqueue_tenant_runs(&db, "a", 100_000).await;
    let pool = db.other_pool(4).await;
    let worker = jobs::Worker::builder(pool.clone())
        .kinds(["tenant_run"])
        .state(pool)
        .queue("default", CONCURRENCY)
        .config(fast_config())
        .build()
        .expect("worker builds")
        .start();
    db.wait_for_count_at_least(
        "the flood to be under way",
        "SELECT count(*) FROM jobs_queue WHERE state = 'done'",
        1_000,
    )
    .await;
    let b_enqueued = Instant::now();
    enqueue_tenant_runs(&db, "b", 10).await;
    // Every claim that begins after this sees b's jobs.
    let b_committed: f64 =
        sqlx::query_scalar("SELECT extract(epoch FROM clock_timestamp())::float8")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let b_done =
        "SELECT count(*) FROM jobs_queue WHERE fair_key = 'tenant:\"b\"' AND state = 'done'";
    db.wait_for_count("tenant b's ten jobs done", b_done, 10)
        .await;
    worker.shutdown().await.unwrap();

    // The claims from b's enqueue to the one that took b's last job, in order (a claim's jobs
    // share their `attempted_at`, when it began): when each began, and the jobs of a and of b
    // it took.
    let claims: Vec<(f64, i64, i64)> = sqlx::query_as(
        "SELECT extract(epoch FROM attempted_at)::float8,
                count(*) FILTER (WHERE fair_key = 'tenant:\"a\"'),
                count(*) FILTER (WHERE fair_key = 'tenant:\"b\"')
         FROM jobs_queue
         WHERE attempted_at >= (SELECT min(created_at) FROM jobs_queue
                                WHERE fair_key = 'tenant:\"b\"')
           AND attempted_at <= (SELECT max(attempted_at) FROM jobs_queue
                                WHERE fair_key = 'tenant:\"b\"')
         GROUP BY attempted_at
         ORDER BY attempted_at",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let (last_claim, before_last) = claims.split_last().expect("b's jobs were claimed");
    assert_eq!(
        claims.iter().map(|(_, _, b)| b).sum::<i64>(),
        10,
        "{claims:?}"
    );
    // Oldest first, every one of a's 98,000-odd remaining jobs would be claimed before b's.
    // Round-robin, every claim that began after b's jobs were committed took some of them, and
    // each claim that took some of b's jobs, but for the last, took at most one more of a's (the
    // share is rounded up).
    for &(began, a, b) in before_last {
        assert!(
            b > 0 || began < b_committed,
            "a claim after b's enqueue took none of b's jobs: {claims:?}"
        );
        assert!(
            b == 0 || a <= b + 1,
            "a claim took {a} of a's jobs and {b} of b's: {claims:?}"
        );
    }
    assert!(last_claim.2 > 0, "{claims:?}");

    // The same, as the jobs started (the jobs claimed ahead of the slots start after those
    // claimed before them, in turn order; the runs' own tasks may start a few out of order).
    let runs = std::mem::take(&mut *TENANT_RUNS.lock().unwrap());
    let of_b: Vec<usize> = (0..runs.len()).filter(|&i| runs[i].0 == "b").collect();
    let (first_b, last_b) = (of_b[0], of_b[of_b.len() - 1]);
    let a_between = runs[first_b..=last_b]
        .iter()
        .filter(|(tenant, _)| tenant == "a")
        .count();
    println!(
        "tenant b's 10 jobs, enqueued behind {} started and the rest of 100,000 of tenant a's: \
         claimed in {} claim(s), after a claim in flight took {} more of a's; the last started {:.1} ms after b's enqueue began, with \
         {a_between} of a's jobs started from b's first start to b's last (concurrency \
         {CONCURRENCY})",
        first_b,
        claims.iter().filter(|(_, _, b)| *b > 0).count(),
        claims.iter().take_while(|(_, _, b)| *b == 0).map(|(_, a, _)| a).sum::<i64>(),
        (runs[last_b].1 - b_enqueued).as_secs_f64() * 1000.0
    );
}

/// Inserts ready jobs of `tenant_task` with the fairness keys given, in order, as plain SQL.
async fn insert_keyed(db: &Db, keys: &[&str]) {
    let payload = r#"{"tenant": "t", "n": 0}"#;
    db.insert_keyed("tenant_task", "fair_key", payload, keys)
        .await;
}

/// Claims `wanted` `tenant_task` jobs of queue `default` through [`claim_fair`], after `cursor`
/// (from the front without one), every one for a free slot; returns the keys of the jobs
/// claimed, in key and id order, and the place of the last one in the fair claim order.
async fn claim_round(
    conn: &mut PgConnection,
    wanted: usize,
    cursor: Option<&FairPlace>,
) -> (Vec<String>, Option<FairPlace>) {
    let (ids, cursor) = claim_round_ahead(conn, wanted, 0, cursor).await;
    let keys: Vec<String> = sqlx::query_scalar(
        "SELECT fair_key FROM jobs_queue WHERE id = ANY($1) ORDER BY fair_key, id",
    )
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    (keys, cursor)
}

/// Claims as [`claim_round`] does, `free` jobs and up to `ahead` more; returns the ids of the
/// jobs claimed, in the fair claim order, and the place of the last one.
async fn claim_round_ahead(
    conn: &mut PgConnection,
    free: usize,
    ahead: usize,
    cursor: Option<&FairPlace>,
) -> (Vec<i64>, Option<FairPlace>) {
    let jobs = claim_fair_turns(conn, ClaimCount { free, ahead }, cursor).await;
    let last = jobs.last().and_then(ClaimedJob::fair_place);
    (jobs.into_iter().map(|job| job.id).collect(), last)
}

/// The key of a cursor, if any.
fn key_of(cursor: Option<&FairPlace>) -> Option<&str> {
    cursor.map(|place| place.key.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_takes_turns_between_keys_and_goes_on_where_the_last_one_ended() {
    let db = Db::new().await;
    insert_keyed(&db, &["a", "a", "a", "a", "a", "b", "b", "c"]).await;
    let mut conn = db.pool.acquire().await.unwrap();

    // Three keys share four jobs: one each, then a second of the first key.
    let (keys, cursor) = claim_round(&mut conn, 4, None).await;
    assert_eq!(keys, ["a", "a", "b", "c"]);
    assert_eq!(
        key_of(cursor.as_ref()),
        Some("a"),
        "the key of the last job taken"
    );

    // The next round starts after `a`: `b`, then around to `a` (`c` has none left).
    let (keys, cursor) = claim_round(&mut conn, 2, cursor.as_ref()).await;
    assert_eq!(keys, ["a", "b"]);
    assert_eq!(key_of(cursor.as_ref()), Some("a"));

    // Only `a` has jobs left: alone, it takes every slot it can fill.
    let (keys, cursor) = claim_round(&mut conn, 10, cursor.as_ref()).await;
    assert_eq!(keys, ["a", "a"]);
    assert_eq!(key_of(cursor.as_ref()), Some("a"));

    let (keys, cursor) = claim_round(&mut conn, 10, cursor.as_ref()).await;
    assert!(keys.is_empty() && cursor.is_none(), "nothing left");
}

/// The keys of jobs `ids`, in that order.
async fn keys_of(db: &Db, ids: &[i64]) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT fair_key FROM unnest($1::bigint[]) WITH ORDINALITY AS claimed(id, place)
         JOIN jobs_queue USING (id) ORDER BY place",
    )
    .bind(ids)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// Keys with one job each: every job once, in key order round the ring, claim after claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_with_one_job_each_are_claimed_once_each_in_key_order() {
    let db = Db::new().await;
    let names: Vec<String> = (0..300).map(|key| format!("k{key:03}")).collect();
    insert_keyed(
        &db,
        &names.iter().map(String::as_str).collect::<Vec<&str>>(),
    )
    .await;
    let mut conn = db.pool.acquire().await.unwrap();
    let mut cursor = None;
    let mut taken = Vec::new();
    for _ in 0..3 {
        let (ids, next) = claim_round_ahead(&mut conn, 16, 112, cursor.as_ref()).await;
        taken.extend(keys_of(&db, &ids).await);
        cursor = next;
    }
    assert_eq!(taken, names, "each key's job once, in key order");
}

/// A job whose key is the empty text, the first in key order, takes its turns: first from no
/// cursor, and by coming round the ring after the last key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_with_an_empty_key_takes_its_turns() {
    let db = Db::new().await;
    insert_keyed(&db, &["", "a", "b", "", "a", "b"]).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let (ids, cursor) = claim_round_ahead(&mut conn, 3, 0, None).await;
    assert_eq!(keys_of(&db, &ids).await, ["", "a", "b"]);
    assert_eq!(key_of(cursor.as_ref()), Some("b"));
    let (ids, cursor) = claim_round_ahead(&mut conn, 3, 0, cursor.as_ref()).await;
    assert_eq!(keys_of(&db, &ids).await, ["", "a", "b"]);
    assert_eq!(key_of(cursor.as_ref()), Some("b"));
}

/// A fair claim takes the jobs for the free slots whatever their attempts, but the jobs it
/// claims ahead of them, in turn order, stop before the first job on its last attempt: a crash
/// while it waited would make it dead without running. The next claim goes on after the last
/// job taken, and takes it first. The rows come in turn order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_claims_ahead_stop_before_a_job_on_its_last_attempt() {
    let db = Db::new().await;
    insert_keyed(&db, &["a"; 5]).await;
    insert_keyed(&db, &["b"; 5]).await;
    let ids: Vec<i64> = db.column("SELECT id FROM jobs_queue ORDER BY id").await;
    let (a, b) = ids.split_at(5);
    db.put_on_last_attempt(b[1]).await;
    let mut conn = db.pool.acquire().await.unwrap();

    // One for the free slot, then ahead, turn by turn, up to b's second job.
    let (claimed, cursor) = claim_round_ahead(&mut conn, 1, 9, None).await;
    assert_eq!(claimed, [a[0], b[0], a[1]]);
    assert_eq!(key_of(cursor.as_ref()), Some("a"));

    // From b on: its second job for the free slot, then the rest ahead.
    let (claimed, cursor) = claim_round_ahead(&mut conn, 1, 9, cursor.as_ref()).await;
    assert_eq!(claimed, [b[1], a[2], b[2], a[3], b[3], a[4], b[4]]);
    assert_eq!(key_of(cursor.as_ref()), Some("b"));
}

/// Claims `count` `tenant_task` jobs of queue `default` through [`claim_fair`], after `cursor`
/// (from the front without one); returns them in the fair claim order.
async fn claim_fair_turns(
    conn: &mut PgConnection,
    count: ClaimCount,
    cursor: Option<&FairPlace>,
) -> Vec<ClaimedJob> {
    let lease = Duration::from_secs(30);
    claim_fair(conn, "default", "tenant_task", lease, count, cursor)
        .await
        .unwrap()
}

/// Jobs claimed ahead that are handed back (they waited too long for a slot) keep their turns:
/// the next claim, from the front, takes them first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_whose_jobs_were_handed_back_get_their_turns_first() {
    let db = Db::new().await;
    insert_keyed(&db, &["a", "a", "b", "b", "c", "c", "d", "d"]).await;
    let ids: Vec<i64> = db.column("SELECT id FROM jobs_queue ORDER BY id").await;
    let mut conn = db.pool.acquire().await.unwrap();
    let claimed = claim_fair_turns(&mut conn, ClaimCount { free: 1, ahead: 7 }, None).await;
    let turns = [
        ids[0], ids[2], ids[4], ids[6], ids[1], ids[3], ids[5], ids[7],
    ];
    assert_eq!(
        claimed.iter().map(|job| job.id).collect::<Vec<i64>>(),
        turns
    );
    // a's and b's first jobs started; the rest waited too long and went back.
    let unstarted: Vec<Outcome> = claimed[2..]
        .iter()
        .map(|job| Outcome::unstarted(job.id, job.lease_token))
        .collect();
    record_outcomes(&db.pool, &unstarted).await.unwrap();

    let next = claim_fair_turns(&mut conn, ClaimCount { free: 2, ahead: 0 }, None).await;
    assert_eq!(
        next.iter().map(|job| job.id).collect::<Vec<i64>>(),
        [ids[4], ids[6]],
        "c's and d's turns, then a's"
    );
}

/// The turns of the `tenant_task` jobs of `key`, by id.
async fn turns_of(db: &Db, key: &str) -> Vec<Option<i64>> {
    sqlx::query_scalar("SELECT fair_turn FROM jobs_queue WHERE fair_key = $1 ORDER BY id")
        .bind(key)
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

/// The keys of the jobs a claim of `wanted` after `cursor` takes, in the fair claim order, and
/// where it ended.
async fn keys_in_order(
    db: &Db,
    conn: &mut PgConnection,
    wanted: usize,
    cursor: Option<&FairPlace>,
) -> (Vec<String>, Option<FairPlace>) {
    let (ids, cursor) = claim_round_ahead(conn, wanted, 0, cursor).await;
    (keys_of(db, &ids).await, cursor)
}

/// A key whose jobs come in while claims go round takes its turns from the next round on, not
/// the turns the claims have passed (it would wait for a look at the front), nor turns after
/// the other keys' backlogs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_comes_in_takes_turns_from_the_next_round() {
    let db = Db::new().await;
    insert_keyed(&db, &["a"; 10]).await;
    insert_keyed(&db, &["b"; 10]).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let (keys, cursor) = keys_in_order(&db, &mut conn, 6, None).await;
    assert_eq!(keys, ["a", "b", "a", "b", "a", "b"]);
    insert_keyed(&db, &["c", "c"]).await;
    assert_eq!(turns_of(&db, "c").await, [Some(4), Some(5)]);
    let (keys, _) = keys_in_order(&db, &mut conn, 6, cursor.as_ref()).await;
    assert_eq!(keys, ["a", "b", "c", "a", "b", "c"]);
}

/// The jobs of one key inserted together take successive turns, and a job inserted ready but
/// not due yet takes none until it is due; then a claim gives it the next round's turn (as many
/// such jobs as it takes), and the claim after takes it in that round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_take_turns_when_they_become_due() {
    let db = Db::new().await;
    let later = |n| {
        jobs::NewJob::of::<tenant_task::Job>(&tenant_task::Args {
            tenant: "later".into(),
            n,
        })
        .unwrap()
        .delay(Duration::from_secs(3600))
    };
    let now = |tenant: &str, n| tenant_task::Args {
        tenant: tenant.into(),
        n,
    };
    let jobs_now = [("x", 0), ("x", 1), ("y", 0), ("x", 2), ("x", 3), ("x", 4)];
    tenant_task::enqueue_many(&db.pool, jobs_now.map(|(tenant, n)| now(tenant, n)))
        .await
        .unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    for job in [later(0), later(1)] {
        jobs::postgres::enqueue_job(&mut conn, &job).await.unwrap();
    }
    let (x, y, later) = ("tenant:\"x\"", "tenant:\"y\"", "tenant:\"later\"");
    assert_eq!(
        turns_of(&db, x).await,
        (1..=5).map(Some).collect::<Vec<_>>()
    );
    assert_eq!(turns_of(&db, y).await, [Some(1)]);
    assert_eq!(turns_of(&db, later).await, [None, None]);

    let (keys, cursor) = keys_in_order(&db, &mut conn, 2, None).await;
    assert_eq!(keys, [x, y]);
    db.execute(
        "UPDATE jobs_queue SET run_at = now() - interval '1 second'
         WHERE fair_key = 'tenant:\"later\"'",
    )
    .await;
    // x's second and third jobs; the later jobs, due now, take the round after the turns that
    // claim read, and the next claim takes them in that round.
    let (keys, cursor) = keys_in_order(&db, &mut conn, 2, cursor.as_ref()).await;
    assert_eq!(keys, [x, x]);
    assert_eq!(turns_of(&db, later).await, [Some(4), Some(5)]);
    let (keys, _) = keys_in_order(&db, &mut conn, 4, cursor.as_ref()).await;
    assert_eq!(keys, [later, x, later, x]);
}

/// A job retried after a backoff gives its turn up until it is due again (it is in no claim's
/// way meanwhile), then takes the next round's; a job handed back unstarted keeps its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_job_takes_a_new_turn_and_one_handed_back_keeps_its_own() {
    let db = Db::new().await;
    insert_keyed(&db, &["a", "b", "a", "b"]).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let claimed = claim_fair_turns(&mut conn, ClaimCount { free: 2, ahead: 0 }, None).await;
    let (retried, handed_back) = (&claimed[0], &claimed[1]);
    let retry = Decision::Retry {
        delay: Duration::from_secs(3600),
        error: AttemptError {
            kind: "transient",
            message: "try again".to_owned(),
        },
    };
    record_outcomes(
        &db.pool,
        &[
            Outcome::of_run(retried.id, retried.lease_token, retry),
            Outcome::unstarted(handed_back.id, handed_back.lease_token),
        ],
    )
    .await
    .unwrap();
    assert_eq!(
        turns_of(&db, "a").await,
        [None, Some(2)],
        "a's first gave its turn up"
    );
    assert_eq!(
        turns_of(&db, "b").await,
        [Some(1), Some(2)],
        "b's first kept its turn"
    );

    // Due again, the retried job takes the round after the turns the next claim reads: after
    // b's kept turn and a's second.
    db.execute(&format!(
        "UPDATE jobs_queue SET run_at = now() - interval '1 second' WHERE id = {}",
        retried.id
    ))
    .await;
    let (keys, cursor) = keys_in_order(&db, &mut conn, 2, None).await;
    assert_eq!(keys, ["b", "a"]);
    assert_eq!(turns_of(&db, "a").await, [Some(3), Some(2)]);
    let (ids, _) = claim_round_ahead(&mut conn, 2, 0, cursor.as_ref()).await;
    assert_eq!(keys_of(&db, &ids).await, ["b", "a"]);
    assert_eq!(ids[1], retried.id);
}

/// A higher priority goes first, whatever the key: the jobs of one priority take turns between
/// their keys, and those of a higher priority are claimed before them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_goes_first_across_keys() {
    let db = Db::new().await;
    insert_keyed(&db, &["a", "b", "a", "b"]).await;
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, priority, fair_key)
         VALUES ('tenant_task', 'default', '{\"tenant\": \"t\", \"n\": 0}', 8, 5, 'z'),
                ('tenant_task', 'default', '{\"tenant\": \"t\", \"n\": 0}', 8, 5, 'z')",
    )
    .await;
    assert_eq!(turns_of(&db, "z").await, [Some(1), Some(2)]);
    let mut conn = db.pool.acquire().await.unwrap();
    let (keys, _) = keys_in_order(&db, &mut conn, 4, None).await;
    assert_eq!(keys, ["z", "z", "a", "b"]);
}

/// The round is kept per priority: claims of a higher priority going far do not send a key that
/// comes in at a lower one behind that priority's backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_comes_in_takes_the_next_round_of_its_priority() {
    let db = Db::new().await;
    insert_keyed(&db, &["a"; 10]).await;
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, priority, fair_key)
         SELECT 'tenant_task', 'default', '{\"tenant\": \"t\", \"n\": 0}', 8, 5, 'h'
         FROM generate_series(1, 8)",
    )
    .await;
    let mut conn = db.pool.acquire().await.unwrap();
    let (keys, _) = keys_in_order(&db, &mut conn, 10, None).await;
    assert_eq!(keys, [vec!["h"; 8], vec!["a"; 2]].concat());
    insert_keyed(&db, &["b"]).await;
    assert_eq!(
        turns_of(&db, "b").await,
        [Some(3)],
        "after a's two claimed turns"
    );
}

/// A job made ready again otherwise than by a hand-back (a replay of a dead job, a rescue)
/// takes a new turn, after its key's ready jobs, not the one it had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_job_takes_a_new_turn() {
    let db = Db::new().await;
    insert_keyed(&db, &["a", "a", "b", "b"]).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let claimed = claim_fair_turns(&mut conn, ClaimCount { free: 2, ahead: 0 }, None).await;
    let dead = &claimed[0];
    db.execute(&format!(
        "UPDATE jobs_queue SET state = 'dead', finished_at = now(), lease_token = NULL
         WHERE id = {}",
        dead.id
    ))
    .await;
    db.execute(&format!(
        "UPDATE jobs_queue SET state = 'ready', attempts = 0, finished_at = NULL, run_at = now()
         WHERE id = {}",
        dead.id
    ))
    .await;
    assert_eq!(
        turns_of(&db, "a").await,
        [Some(3), Some(2)],
        "a new turn, after a's ready job's"
    );
}

/// Jobs inserted by a transaction that commits after claims went past the round it read move on
/// at commit by as many turns: the next claim, going on from where the last one began, takes
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_enqueued_while_claims_go_on_take_turns_as_of_their_commit() {
    let db = Db::new().await;
    insert_keyed(&db, &["a"; 20]).await;
    let mut enqueuing = db.pool.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, fair_key)
         VALUES ('tenant_task', 'default', '{\"tenant\": \"t\", \"n\": 0}', 8, 'b')",
    )
    .execute(&mut *enqueuing)
    .await
    .unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    let (_, first) = keys_in_order(&db, &mut conn, 4, None).await;
    let (keys, _) = keys_in_order(&db, &mut conn, 4, first.as_ref()).await;
    assert_eq!(keys, ["a"; 4]);
    enqueuing.commit().await.unwrap();
    assert_eq!(
        turns_of(&db, "b").await,
        [Some(9)],
        "after the 8 turns claimed"
    );
    let (keys, _) = keys_in_order(&db, &mut conn, 2, first.as_ref()).await;
    assert_eq!(keys, ["a", "b"]);
}

/// At commit, only the jobs whose turns the claims reached meanwhile move on: a job that took
/// its turn after its key's backlog, past the round, keeps it; and a job made ready again in the
/// transaction (here a released dependent) moves on too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_commit_only_the_turns_the_claims_reached_move_on() {
    let db = Db::new().await;
    insert_keyed(&db, &["a"; 20]).await;
    insert_keyed(&db, &["b"; 10]).await;
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, state, fair_key)
         VALUES ('tenant_task', 'default', '{\"tenant\": \"t\", \"n\": 0}', 8, 'waiting', 'c')",
    )
    .await;
    let mut enqueuing = db.pool.begin().await.unwrap();
    for statement in [
        // Reads round 0: b's next turn is 11, past its backlog; c's released job takes turn 1.
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, fair_key)
         VALUES ('tenant_task', 'default', '{\"tenant\": \"t\", \"n\": 0}', 8, 'b')",
        "UPDATE jobs_queue SET state = 'ready' WHERE fair_key = 'c'",
    ] {
        sqlx::query(statement)
            .execute(&mut *enqueuing)
            .await
            .unwrap();
    }
    let mut conn = db.pool.acquire().await.unwrap();
    let (keys, _) = keys_in_order(&db, &mut conn, 8, None).await;
    assert_eq!(keys, ["a", "b", "a", "b", "a", "b", "a", "b"]);
    enqueuing.commit().await.unwrap();
    assert_eq!(
        turns_of(&db, "b").await[10],
        Some(11),
        "past the round: kept"
    );
    assert_eq!(
        turns_of(&db, "c").await,
        [Some(5)],
        "reached: moved on by 4"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_with_backlogs_get_equal_shares_claim_after_claim() {
    let db = Db::new().await;
    insert_keyed(&db, &["x"; 30]).await;
    insert_keyed(&db, &["y"; 30]).await;
    insert_keyed(&db, &["z"; 30]).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let mut cursor = None;
    let mut taken: Vec<String> = Vec::new();
    // Claims of 10 between 3 keys: the share is rounded up, and the key that gets the extra job
    // goes round with the cursor.
    for _ in 0..6 {
        let (keys, next) = claim_round(&mut conn, 10, cursor.as_ref()).await;
        assert_eq!(keys.len(), 10);
        taken.extend(keys);
        cursor = next;
    }
    let count = |key: &str| taken.iter().filter(|taken| *taken == key).count();
    assert_eq!([count("x"), count("y"), count("z")], [20, 20, 20]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_alone_takes_every_slot_and_keys_with_only_later_jobs_are_passed_over() {
    let db = Db::new().await;
    insert_keyed(&db, &["a"; 20]).await;
    insert_keyed(&db, &["later"; 3]).await;
    db.execute("UPDATE jobs_queue SET run_at = now() + interval '1 hour' WHERE fair_key = 'later'")
        .await;
    let mut conn = db.pool.acquire().await.unwrap();
    let (keys, _) = claim_round(&mut conn, 16, None).await;
    assert_eq!(keys, vec!["a".to_string(); 16]);
    db.execute("INSERT INTO jobs_queue_pauses (queue, paused_by) VALUES ('default', 'test')")
        .await;
    let (keys, _) = claim_round(&mut conn, 16, None).await;
    assert!(keys.is_empty(), "a paused queue gives nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_of_a_fair_kind_without_a_key_still_run() {
    let db = Db::new().await;
    // Enqueued before the kind declared its fairness key: no key.
    sqlx::query(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts)
         VALUES ('tenant_task', 'default', '{\"tenant\": \"old\", \"n\": 0}', 8)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let args = (0..3).map(|n| tenant_task::Args {
        tenant: "new".to_owned(),
        n,
    });
    tenant_task::enqueue_many(&db.pool, args).await.unwrap();
    let worker = start_worker(&db.pool, &["tenant_task"], fast_config());
    db.wait_for_count(
        "every job done",
        "SELECT count(*) FROM jobs_queue WHERE state = 'done'",
        4,
    )
    .await;
    worker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_enqueue_path_stores_the_rendered_key() {
    let db = Db::new().await;
    let single = tenant_task::enqueue(&db.pool, "acme".into(), 1)
        .await
        .unwrap();
    let deduped = tenant_report::enqueue(&db.pool, "acme".into(), 7)
        .await
        .unwrap()
        .id();
    let many = tenant_report::enqueue_many(
        &db.pool,
        [
            tenant_report::Args {
                tenant: "globex".into(),
                day: 7,
            },
            tenant_report::Args {
                tenant: "acme".into(),
                day: 7,
            },
        ],
    )
    .await
    .unwrap();
    assert!(!many[1].is_new(), "the dedupe key still holds");
    let after = jobs::NewJob::of::<tenant_task::Job>(&tenant_task::Args {
        tenant: "initech".into(),
        n: 2,
    })
    .unwrap()
    .after([single]);
    let mut conn = db.pool.acquire().await.unwrap();
    let dependent = jobs::postgres::enqueue_job(&mut conn, &after)
        .await
        .unwrap()
        .id();
    // One job through the bulk path, which writes keyless jobs alike in a cheaper statement.
    let alone = tenant_task::enqueue_many(
        &db.pool,
        [tenant_task::Args {
            tenant: "umbrella".into(),
            n: 3,
        }],
    )
    .await
    .unwrap();
    let keys: Vec<(i64, String)> = db
        .rows("SELECT id, fair_key FROM jobs_queue ORDER BY id")
        .await;
    assert_eq!(
        keys,
        vec![
            (single.id(), "tenant:\"acme\"".to_string()),
            (deduped, "\"acme\"".to_string()),
            (many[0].id(), "\"globex\"".to_string()),
            (dependent, "tenant:\"initech\"".to_string()),
            (alone[0].id(), "tenant:\"umbrella\"".to_string()),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_too_long_to_index_is_refused_before_the_database() {
    let db = Db::new().await;
    db.execute("CREATE TABLE orders (id bigint PRIMARY KEY)")
        .await;
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("INSERT INTO orders (id) VALUES (1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let error = tenant_task::enqueue_in(&mut tx, "x".repeat(MAX_KEY_BYTES), 1)
        .await
        .expect_err("refused");
    assert!(
        matches!(
            error,
            EnqueueError::Encode(EncodeError::KeyTooLong { key: "fair_key", limit, .. }) if limit == MAX_KEY_BYTES
        ),
        "{error:?}"
    );
    let mut nul = jobs::NewJob::of::<tenant_task::Job>(&tenant_task::Args {
        tenant: "plain".into(),
        n: 1,
    })
    .unwrap();
    nul.fair_key = Some("tenant:\u{0}".into());
    let error = jobs::postgres::enqueue_job(&mut tx, &nul)
        .await
        .expect_err("refused");
    assert!(
        matches!(&error, EnqueueError::Encode(EncodeError::NulCharacter { field, .. }) if field == "fair_key"),
        "{error:?}"
    );
    tx.commit().await.unwrap();
    assert_eq!(db.count("SELECT count(*) FROM orders").await, 1);
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_given_at_run_time_to_a_fair_kind_is_refused() {
    let db = Db::new().await;
    for builder in [
        Worker::builder(db.pool.clone()).max_running("tenant_task", 2),
        Worker::builder(db.pool.clone()).rate_limit("tenant_task", "10/1s".parse().unwrap()),
    ] {
        let error = refusal(builder.kinds(["tenant_task"]).state(db.pool.clone()));
        assert!(
            matches!(
                error,
                WorkerError::Registry(RegistryError::FairKeyWithLimit {
                    kind: "tenant_task"
                })
            ),
            "{error}"
        );
    }
}

/// A job whose commit spans several claims is passed by each of them (they cannot see it), and
/// only a claim that reads their range again takes it: from where the older of two such claims
/// began, not from where the last one did. So a producer's claims in turn order read again from
/// where its recent claims began. (The commit's turn is set early here, through `SET
/// CONSTRAINTS`, to hold that moment open.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_committed_while_claims_ran_is_found_by_reading_their_range_again() {
    let db = Db::new().await;
    insert_keyed(&db, &["a"; 64]).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let sixteen = ClaimCount { free: 16, ahead: 0 };
    let first_place = |jobs: &[ClaimedJob]| jobs.first().and_then(ClaimedJob::fair_place).unwrap();
    // a's turns 1 to 16: the round is 16.
    let first = claim_fair_turns(&mut conn, sixteen, None).await;

    // b's job takes turn 17; its commit is not visible yet.
    let mut enqueue = db.pool.begin().await.unwrap();
    let b: i64 = sqlx::query_scalar(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, fair_key)
         VALUES ('tenant_task', 'default', '{\"tenant\": \"t\", \"n\": 0}', 8, 'b')
         RETURNING id",
    )
    .fetch_one(&mut *enqueue)
    .await
    .unwrap();
    sqlx::query("SET CONSTRAINTS ALL IMMEDIATE")
        .execute(&mut *enqueue)
        .await
        .unwrap();
    // Two claims meanwhile: a's turns 17 to 32, then 33 to 48.
    let second = claim_fair_turns(&mut conn, sixteen, Some(&first_place(&first))).await;
    let third = claim_fair_turns(&mut conn, sixteen, Some(&first_place(&second))).await;
    assert_eq!(second[0].fair_turn, Some(17));
    enqueue.commit().await.unwrap();

    let from_the_last = claim_fair_turns(&mut conn, sixteen, Some(&first_place(&third))).await;
    assert!(
        !from_the_last.iter().any(|job| job.id == b),
        "read from where the last claim began, b's turn is passed"
    );
    let start_of_turn_17 = FairPlace {
        key: String::new(),
        id: 0,
        ..first_place(&second)
    };
    let again = claim_fair_turns(&mut conn, sixteen, Some(&start_of_turn_17)).await;
    assert_eq!(
        again.first().map(|job| job.id),
        Some(b),
        "b's job, in its turn"
    );
}
