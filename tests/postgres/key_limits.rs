//! Per-key limits: at most N jobs of a kind with the same limit key run at once, across every
//! worker, while the other keys' jobs go on.

use jobs::postgres::__private::store::{
    claim_key_limited, ClaimCount, ClaimLimits, KeyRound, LimitedClaim,
};
use jobs::{RegistryError, Worker, WorkerError, WorkerHandle};
use sqlx::PgConnection;

use crate::support::{fast_config, refusal, start_worker, Db};
use crate::test_jobs::per_merchant;

/// Enqueues `count` [`per_merchant`] jobs of each of `merchants`, taking turns, each working
/// `millis` ms.
async fn enqueue_per_merchant(db: &Db, merchants: &[&str], count: usize, millis: u64) {
    let jobs = (0..count).flat_map(|_| {
        merchants.iter().map(move |merchant| per_merchant::Args {
            merchant: (*merchant).to_owned(),
            millis,
        })
    });
    per_merchant::enqueue_many(&db.pool, jobs)
        .await
        .expect("enqueue per_merchant jobs");
}

/// Starts a worker of `per_merchant` with `concurrency` slots on a pool of its own, as another
/// process would have.
async fn start_merchant_worker(db: &Db, concurrency: usize) -> WorkerHandle {
    let pool = db.other_pool(4).await;
    Worker::builder(pool)
        .kinds(["per_merchant"])
        .state(db.pool.clone())
        .queue("default", concurrency)
        .config(fast_config())
        .build()
        .expect("worker builds")
        .start()
}

/// What `jobs stats` shows of kind `kind`'s limits, as the live worker declares them; panics
/// when it shows none.
async fn limit_stats_of(db: &Db, kind: &str) -> jobs::admin::LimitStats {
    let stats = jobs::admin::stats(&db.pool).await.unwrap();
    stats
        .limits
        .into_iter()
        .find(|limit| limit.limits.kind == kind)
        .unwrap_or_else(|| panic!("the limits of {kind} are shown"))
}

/// Waits until `jobs` of merchant `merchant`'s jobs are done, naming `what` it waits for.
async fn wait_for_merchant_done(db: &Db, merchant: &str, jobs: i64, what: &str) {
    db.wait_for_count(
        what,
        &format!(
            "SELECT count(*) FROM jobs_queue WHERE limit_key = '\"{merchant}\"' AND state = 'done'"
        ),
        jobs,
    )
    .await;
}

/// The most jobs that were running at once, of one limit key (`per_key`) or in all, from the
/// rows: a job runs, for the database, from its claim (`attempted_at`) until its outcome is
/// written (`finished_at`, the start of the transaction that wrote it, so overlaps are never
/// over-counted), and the most running at once is reached at some job's start.
pub async fn most_running_at_once(db: &Db, per_key: bool) -> i64 {
    let same_key = if per_key {
        "other.limit_key = started.limit_key AND"
    } else {
        ""
    };
    db.count(&format!(
        "SELECT coalesce(max(overlapping), 0) FROM (
             SELECT (SELECT count(*) FROM jobs_queue AS other
                     WHERE {same_key} other.attempted_at <= started.attempted_at
                       AND coalesce(other.finished_at, 'infinity') > started.attempted_at)
                    AS overlapping
             FROM jobs_queue AS started
         ) AS at_each_start"
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_limit_holds_across_workers_and_other_keys_go_on() {
    let db = Db::new().await;
    let merchants = ["acme", "globex", "initech"];
    enqueue_per_merchant(&db, &merchants, 12, 20).await;
    let workers = [
        start_merchant_worker(&db, 8).await,
        start_merchant_worker(&db, 8).await,
    ];
    // Sampled while the workers drain: never more than 2 running per merchant.
    jobs_testkit::wait_until("every job done", || async {
        let running: Vec<(String, i64)> = db
            .rows(
                "SELECT limit_key, count(*) FROM jobs_queue WHERE state = 'running'
                 GROUP BY limit_key",
            )
            .await;
        for (key, count) in &running {
            assert!(
                *count <= 2,
                "{count} jobs of merchant {key} running at once"
            );
        }
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'done'")
            .await
            == 36
    })
    .await;
    for worker in workers {
        worker.shutdown().await.unwrap();
    }
    // From the rows: never more than 2 per merchant, and more than 2 in all (the merchants'
    // jobs ran side by side; the first claim starts 2 of each).
    let most = most_running_at_once(&db, true).await;
    let most_in_all = most_running_at_once(&db, false).await;
    println!(
        "per-key limit 2: at most {most} of one merchant running at once, {most_in_all} in all"
    );
    assert!(
        most <= 2,
        "{most} jobs of one merchant were running at once"
    );
    assert!(most_in_all > 2, "the merchants' jobs ran side by side");
    assert_eq!(
        db.count("SELECT count(*) FROM runs").await,
        36,
        "each job ran once: held-back jobs waited ready, spending no attempt"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_with_a_backlog_does_not_hold_back_the_others() {
    let db = Db::new().await;
    // Merchant a's 50 jobs come first; b's 2 after them.
    enqueue_per_merchant(&db, &["a"], 50, 50).await;
    enqueue_per_merchant(&db, &["b"], 2, 0).await;
    let worker = start_merchant_worker(&db, 8).await;
    wait_for_merchant_done(&db, "b", 2, "merchant b's jobs done").await;
    worker.shutdown().await.unwrap();
    // From the rows: b's jobs started with the first 2 of a's, not after a's 50.
    let a_before_b = db
        .count(
            "SELECT count(*) FROM jobs_queue
             WHERE limit_key = '\"a\"'
               AND attempted_at <= (SELECT max(attempted_at) FROM jobs_queue
                                    WHERE limit_key = '\"b\"')",
        )
        .await;
    assert!(
        a_before_b <= 2,
        "{a_before_b} of a's jobs started before b's last: b waited behind a's backlog"
    );
    assert!(most_running_at_once(&db, true).await <= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_another_transaction_holds_is_passed_over_not_waited_for() {
    let db = Db::new().await;
    enqueue_per_merchant(&db, &["a", "b"], 1, 0).await;
    // A transaction that holds merchant a's job (a cancel or a dependent's enqueue under way),
    // and keeps it while b's job should run.
    let holding = db.other_pool(1).await;
    let mut holder = holding.begin().await.unwrap();
    sqlx::query("SELECT id FROM jobs_queue WHERE payload ->> 'merchant' = 'a' FOR UPDATE")
        .execute(&mut *holder)
        .await
        .unwrap();
    let _worker = start_merchant_worker(&db, 4).await;
    wait_for_merchant_done(&db, "b", 1, "merchant b's job done while a's is held").await;
    holder.rollback().await.unwrap();
    wait_for_merchant_done(&db, "a", 1, "merchant a's job done once let go").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_without_a_limit_key_still_run() {
    let db = Db::new().await;
    sqlx::query(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts)
         SELECT 'per_merchant', 'default', '{\"merchant\": \"old\", \"millis\": 0}', 8
         FROM generate_series(1, 3)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    enqueue_per_merchant(&db, &["new"], 3, 0).await;
    let worker = start_merchant_worker(&db, 4).await;
    db.wait_for_count(
        "every job done",
        "SELECT count(*) FROM jobs_queue WHERE state = 'done'",
        6,
    )
    .await;
    worker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_limits_given_at_run_time_need_a_key() {
    let db = Db::new().await;
    for builder in [
        Worker::builder(db.pool.clone()).max_running_per_key("record_run", 2),
        Worker::builder(db.pool.clone()).rate_limit_per_key("record_run", "10/1s".parse().unwrap()),
    ] {
        let error = refusal(builder.kinds(["record_run"]).state(db.pool.clone()));
        assert!(
            matches!(
                error,
                WorkerError::Registry(RegistryError::PerKeyLimitWithoutKey { kind: "record_run" })
            ),
            "{error}"
        );
    }
    let error = refusal(
        Worker::builder(db.pool.clone())
            .kinds(["per_merchant"])
            .state(db.pool.clone())
            .max_running_per_key("per_merchant", 0),
    );
    assert!(
        matches!(&error, WorkerError::NoRunningSlots { setting: "max_running_per_key", kind } if kind == "per_merchant"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_show_the_keys_at_their_limit_and_the_jobs_they_hold_back() {
    let db = Db::new().await;
    let worker = start_merchant_worker(&db, 4).await;
    jobs_testkit::wait_until("the worker to record itself", || async {
        jobs::admin::live_workers(&db.pool).await.unwrap().len() == 1
    })
    .await;
    // In a queue the worker does not serve: merchant a has 2 running (its limit) and 5 due,
    // merchant b 1 running and 3 due.
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, state, attempts, attempted_at,
                                 lease_token, lease_expires_at, limit_key)
         SELECT 'per_merchant', 'elsewhere', '{}', 8, 'running', 1, now(), gen_random_uuid(),
                now() + interval '1 hour', key
         FROM unnest(ARRAY['a', 'a', 'b']) AS key;
         INSERT INTO jobs_queue (kind, queue, payload, max_attempts, limit_key)
         SELECT 'per_merchant', 'elsewhere', '{}', 8, key
         FROM unnest(ARRAY['a', 'a', 'a', 'a', 'a', 'b', 'b', 'b']) AS key",
    )
    .await;
    let limit = limit_stats_of(&db, "per_merchant").await;
    worker.shutdown().await.unwrap();
    assert_eq!(limit.limits.max_running_per_key, Some(2));
    assert_eq!(limit.keys_at_limit, 1, "merchant a is at its limit");
    assert_eq!(limit.held_back, 5, "merchant a's due jobs wait on it");
    assert_eq!((limit.running, limit.due), (3, 8));
}

/// Inserts ready `per_merchant` jobs with the limit keys given, in order, as plain SQL.
async fn insert_merchant_jobs(db: &Db, keys: &[&str]) {
    db.insert_keyed("per_merchant", "limit_key", "{}", keys)
        .await;
}

/// Puts merchant `key` at a limit of `running`: that many of its jobs running, none ready. While
/// a key is at its limit, the claims walk the keys.
async fn put_key_at_limit(db: &Db, key: &str, running: u32) {
    db.execute(&format!(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts, state, attempts, attempted_at,
                                 lease_token, lease_expires_at, limit_key)
         SELECT 'per_merchant', 'default', '{{}}', 8, 'running', 1, now(), gen_random_uuid(),
                now() + interval '1 hour', '{key}'
         FROM generate_series(1, {running})"
    ))
    .await;
}

/// Claims `count` `per_merchant` jobs of queue `default` through [`claim_key_limited`], at most
/// `per_key` running per merchant, going on from `round`.
async fn claim_per_merchant(
    conn: &mut PgConnection,
    count: ClaimCount,
    per_key: u32,
    round: &mut KeyRound,
) -> LimitedClaim {
    let limits = ClaimLimits {
        max_running: None,
        rate_limit: None,
        max_running_per_key: Some(per_key),
        rate_limit_per_key: None,
    };
    let lease = std::time::Duration::from_secs(30);
    claim_key_limited(conn, "per_merchant", "default", count, limits, lease, round)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_goes_round_again_when_keys_could_not_use_their_share() {
    let db = Db::new().await;
    // Merchant a has a backlog; b and c one job each; z is at its limit, so the claim walks the
    // keys. Under a limit of 5 per merchant, a claim of 8 shares 3 per key in its first round (a
    // 3, b 1, c 1): a's 2 more come in a second.
    insert_merchant_jobs(&db, &["a", "a", "a", "a", "a", "a", "a", "a", "b", "c"]).await;
    put_key_at_limit(&db, "z", 5).await;
    let mut round = KeyRound::new(std::time::Duration::from_secs(3600));
    let mut conn = db.pool.acquire().await.unwrap();
    let count = ClaimCount { free: 8, ahead: 0 };
    let claim = claim_per_merchant(&mut conn, count, 5, &mut round).await;
    let running: Vec<(String, i64)> = db
        .rows(
            "SELECT limit_key, count(*) FROM jobs_queue WHERE state = 'running'
             GROUP BY limit_key ORDER BY limit_key",
        )
        .await;
    assert_eq!(claim.jobs.len(), 7, "all the limit allows");
    assert_eq!(
        running,
        vec![
            ("a".to_string(), 5),
            ("b".to_string(), 1),
            ("c".to_string(), 1),
            ("z".to_string(), 5)
        ]
    );
    assert!(claim.walked_keys);
    assert!(claim.held_back, "a's other jobs wait on its limit");
}

/// A per-key limited claim takes the jobs for the free slots whatever their attempts, but the
/// jobs it claims ahead of them, in turn order, stop before the first job on its last attempt,
/// and count against the keys' limits from their claim. The jobs come in turn order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_ahead_stop_before_a_job_on_its_last_attempt_and_count_against_the_limit() {
    let db = Db::new().await;
    insert_merchant_jobs(&db, &["a", "a", "a", "a", "b", "b", "b", "b"]).await;
    let ids: Vec<i64> = db.column("SELECT id FROM jobs_queue ORDER BY id").await;
    let (a, b) = ids.split_at(4);
    db.put_on_last_attempt(b[1]).await;
    let mut round = KeyRound::new(std::time::Duration::from_secs(3600));
    let mut conn = db.pool.acquire().await.unwrap();
    let count = ClaimCount { free: 1, ahead: 7 };
    let mut claim_ids = async || {
        let claim = claim_per_merchant(&mut conn, count, 3, &mut round).await;
        claim.jobs.iter().map(|job| job.id).collect::<Vec<i64>>()
    };
    // One for the free slot, then ahead, turn by turn, up to b's second job.
    assert_eq!(claim_ids().await, [a[0], b[0], a[1]]);
    // From b on: its second job for the free slot, then ahead as far as the limit of 3 running
    // per key lets: the jobs claimed ahead count as running.
    assert_eq!(claim_ids().await, [b[1], a[2], b[2]]);
}

/// A claim ahead alone (no free slot) that stops before the first job in turn order, on its last
/// attempt, takes nothing and leaves the round where it was: the keys it visited keep their
/// turns, and the next claim with a free slot takes that job first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_ahead_that_took_nothing_leaves_the_keys_their_turns() {
    let db = Db::new().await;
    let keys = ["a", "b", "c", "d", "e", "f", "g", "h"];
    insert_merchant_jobs(&db, &keys).await;
    insert_merchant_jobs(&db, &keys).await;
    let ids: Vec<i64> = db.column("SELECT id FROM jobs_queue ORDER BY id").await;
    // z at its limit: the claims walk the keys.
    put_key_at_limit(&db, "z", 2).await;
    db.put_on_last_attempt(ids[0]).await;
    let mut round = KeyRound::new(std::time::Duration::from_secs(3600));
    let mut conn = db.pool.acquire().await.unwrap();
    let ahead_alone = ClaimCount { free: 0, ahead: 4 };
    let claim = claim_per_merchant(&mut conn, ahead_alone, 2, &mut round).await;
    assert!(
        claim.jobs.is_empty(),
        "a's first job is on its last attempt"
    );
    assert_eq!(round.cursor, None, "the round stays where it was");
    let free = ClaimCount { free: 2, ahead: 0 };
    let claim = claim_per_merchant(&mut conn, free, 2, &mut round).await;
    assert_eq!(
        claim
            .jobs
            .iter()
            .map(|job| job.turn_key.as_deref())
            .collect::<Vec<_>>(),
        [Some("a"), Some("b")],
        "a's and b's turns come first"
    );
    assert_eq!(claim.jobs[0].id, ids[0]);
    assert!(claim.walked_keys);
}

/// The most jobs of one limit key started in any window of `window_ms`, from the rows' start
/// times (each window starting at a start).
async fn most_started_per_key_in_any_window(db: &Db, window_ms: u32) -> i64 {
    db.count(&format!(
        "SELECT coalesce(max(in_window), 0) FROM (
             SELECT (SELECT count(*) FROM jobs_queue AS other
                     WHERE other.limit_key = first.limit_key
                       AND other.attempted_at >= first.attempted_at
                       AND other.attempted_at < first.attempted_at
                                                + interval '{window_ms} milliseconds')
                    AS in_window
             FROM jobs_queue AS first WHERE first.attempted_at IS NOT NULL
         ) AS windows"
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_rate_limit_holds_in_every_window_across_workers() {
    let db = Db::new().await;
    let jobs = (0..9).flat_map(|_| {
        ["acme", "globex", "initech"].map(|merchant| crate::test_jobs::per_merchant_rated::Args {
            merchant: merchant.to_owned(),
        })
    });
    crate::test_jobs::per_merchant_rated::enqueue_many(&db.pool, jobs)
        .await
        .unwrap();
    let mut workers = Vec::new();
    for _ in 0..2 {
        let pool = db.other_pool(4).await;
        workers.push(start_worker(&pool, &["per_merchant_rated"], fast_config()));
    }
    db.wait_for_count(
        "every job done",
        "SELECT count(*) FROM jobs_queue WHERE state = 'done'",
        27,
    )
    .await;
    for worker in workers {
        worker.shutdown().await.unwrap();
    }
    let most = most_started_per_key_in_any_window(&db, 300).await;
    let span_ms: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM max(attempted_at) - min(attempted_at))::float8 * 1000
         FROM jobs_queue",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    println!(
        "per-key rate limit 3/300ms: at most {most} of one merchant started in any 300 ms; \
         9 per merchant took {span_ms:.0} ms (the limit's pace: 600 ms after the first window)"
    );
    assert!(
        most <= 3,
        "{most} jobs of one merchant started within 300 ms"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM runs").await,
        27,
        "each job ran once: held-back jobs waited ready, spending no attempt"
    );
    let rows = db
        .count("SELECT count(*) FROM jobs_key_rate_limits WHERE kind = 'per_merchant_rated'")
        .await;
    assert!(rows <= 3, "one row per merchant at most ({rows})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_show_the_keys_whose_rate_window_is_full() {
    let db = Db::new().await;
    let pool = db.other_pool(4).await;
    let worker = Worker::builder(pool)
        .kinds(["per_merchant_rated"])
        .state(db.pool.clone())
        .config(fast_config())
        .build()
        .expect("worker builds")
        .start();
    jobs_testkit::wait_until("the worker to record itself", || async {
        jobs::admin::live_workers(&db.pool).await.unwrap().len() == 1
    })
    .await;
    // In a queue the worker does not serve: merchant a has 4 due jobs and its window full (3
    // starts, recorded an hour ahead so that the 300 ms window stays full while the test looks);
    // merchant b has 2 due jobs and no starts.
    db.execute(
        "INSERT INTO jobs_key_rate_limits (kind, key, window_secs, last_started_at, started_at,
                                           started)
         VALUES ('per_merchant_rated', 'a', 0.3, now() + interval '1 hour',
                 ARRAY[now() + interval '1 hour'], ARRAY[3]);
         INSERT INTO jobs_queue (kind, queue, payload, max_attempts, limit_key)
         SELECT 'per_merchant_rated', 'elsewhere', '{}', 8, key
         FROM unnest(ARRAY['a', 'a', 'a', 'a', 'b', 'b']) AS key",
    )
    .await;
    let limit = limit_stats_of(&db, "per_merchant_rated").await;
    worker.shutdown().await.unwrap();
    assert_eq!(
        limit.limits.rate_limit_per_key,
        Some("3/300ms".parse().unwrap())
    );
    assert_eq!(limit.keys_at_limit, 1, "merchant a's window is full");
    assert_eq!(limit.held_back, 4, "merchant a's due jobs wait on it");
}

/// The ids of the jobs `claim` took, in its order.
fn ids_of(claim: &LimitedClaim) -> Vec<i64> {
    claim.jobs.iter().map(|job| job.id).collect()
}

/// While no key is at its limit, a claim reads the jobs in turn order; one that would take a
/// key past its limit stops before that key's job, so that no job of a key is passed by a later
/// one of the same key. While a key is at its limit, the claims walk the keys instead: they
/// serve the other keys, and that key's first job once it has room again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_go_by_turns_until_a_key_is_at_its_limit_and_walk_the_keys_while_one_is() {
    let db = Db::new().await;
    // Turns 1, 2 and 3 of each.
    insert_merchant_jobs(&db, &["a", "a", "a", "b", "b", "b"]).await;
    let ids: Vec<i64> = db.column("SELECT id FROM jobs_queue ORDER BY id").await;
    let (a, b) = ids.split_at(3);
    let mut round = KeyRound::new(std::time::Duration::from_secs(3600));
    let mut conn = db.pool.acquire().await.unwrap();
    let one_slot = ClaimCount { free: 1, ahead: 0 };
    let four_slots = ClaimCount { free: 4, ahead: 0 };
    let end = async |id: i64| {
        db.execute(&format!("DELETE FROM jobs_queue WHERE id = {id}"))
            .await;
    };

    let claim = claim_per_merchant(&mut conn, one_slot, 1, &mut round).await;
    assert_eq!(ids_of(&claim), [a[0]]);
    assert_eq!(claim.jobs[0].fair_turn, Some(1), "taken in its turn");
    assert!(!claim.walked_keys);

    // a is at its limit of 1: the keys are walked, past a.
    let claim = claim_per_merchant(&mut conn, four_slots, 1, &mut round).await;
    assert_eq!(ids_of(&claim), [b[0]]);
    assert!(claim.walked_keys);

    // a has room again, b is at its limit: the walk takes a's next job, its second.
    end(a[0]).await;
    let claim = claim_per_merchant(&mut conn, four_slots, 1, &mut round).await;
    assert_eq!(ids_of(&claim), [a[1]]);
    assert!(claim.walked_keys);

    // No key at its limit. A producer whose last claim found one walks the keys once more; one
    // that has not (another worker's) goes by turns, from the front: b's second job (turn 2),
    // then a's third (turn 3); b's third, in turn 3 too, would take b past its limit, and the
    // claim stops there (the walk after it finds no key with room).
    end(a[1]).await;
    end(b[0]).await;
    assert!(round.walks_keys());
    let mut other_round = KeyRound::new(std::time::Duration::from_secs(3600));
    let claim = claim_per_merchant(&mut conn, four_slots, 1, &mut other_round).await;
    assert_eq!(ids_of(&claim), [b[1], a[2]]);
    assert_eq!(
        claim
            .jobs
            .iter()
            .map(|job| job.fair_turn)
            .collect::<Vec<_>>(),
        [Some(2), Some(3)]
    );
    let ready: Vec<i64> = db
        .column("SELECT id FROM jobs_queue WHERE state = 'ready'")
        .await;
    assert_eq!(ready, [b[2]]);
}
