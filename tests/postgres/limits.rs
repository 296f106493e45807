//! Limits across workers: a rate limit holds in every window, whichever worker claims, and
//! the jobs it holds back wait ready, spending no attempt.

use std::time::Duration;

use jobs::{JobId, RateLimit, Worker, WorkerConfig, WorkerError, WorkerHandle};

use jobs_testkit::{most_started_in_any_window, pace_after_first_window};

use crate::support::{fast_config, refusal, wait_until, Db};
use crate::test_jobs::{flaky, insert_due_record_runs, rate_limited_record, record_run};

/// Starts a worker of `kinds` on a pool of its own, as another process would have, with
/// `limit` given at run time to `record_run`. It polls only every 10 s: a worker held back by a
/// rate limit must claim again when the window allows, not when it next polls.
async fn start_rate_limited_worker(
    db: &Db,
    kinds: &[&str],
    limit: Option<RateLimit>,
) -> WorkerHandle {
    let pool = db.other_pool(6).await;
    let mut builder = Worker::builder(pool)
        .kinds(kinds.iter().copied())
        .state(db.pool.clone())
        .config(WorkerConfig {
            poll_interval: Duration::from_secs(10),
            ..fast_config()
        });
    if let Some(limit) = limit {
        builder = builder.rate_limit("record_run", limit);
    }
    builder.build().expect("worker builds").start()
}

/// Enqueues `count` [`record_run`] jobs; returns their ids.
async fn enqueue_record_runs(db: &Db, count: usize) -> Vec<JobId> {
    let mut ids = Vec::new();
    for n in 0..count {
        ids.push(
            record_run::enqueue(&db.pool, format!("job {n}"))
                .await
                .expect("enqueue record_run")
                .id(),
        );
    }
    ids
}

/// Waits until every job in `ids` is done.
async fn wait_all_done(db: &Db, ids: &[JobId]) {
    let query = format!(
        "SELECT count(*) FROM jobs_queue WHERE state = 'done' AND id = ANY('{{{}}}')",
        ids.iter()
            .map(|id| id.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    db.wait_for_count("every job done", &query, ids.len() as i64)
        .await;
}

/// Checks what a drain of `jobs` jobs of `kind` under `limit` left: no window above the limit,
/// and one attempt each; prints the pace the jobs after the first window started at, against the
/// limit's rate. (That they start as soon as the window allows is what the drain's deadline
/// checks: the workers poll every 10 s, so a worker that waited for its poll would take several
/// times the deadline.)
async fn check_drain_under(db: &Db, kind: &str, jobs: i64, limit: RateLimit) {
    let most = most_started_in_any_window(&db.pool, kind, limit.per())
        .await
        .expect("count starts per window");
    assert!(
        most <= i64::from(limit.jobs()),
        "{most} jobs of `{kind}` started within one window of {limit}"
    );
    let attempts: i64 = db
        .count(&format!(
            "SELECT coalesce(sum(attempts), 0) FROM jobs_queue WHERE kind = '{kind}'"
        ))
        .await;
    assert_eq!(
        attempts, jobs,
        "a job held back by the limit spent no attempt"
    );
    let pace = pace_after_first_window(&db.pool, kind, i64::from(limit.jobs()))
        .await
        .expect("pace of starts");
    println!(
        "{jobs} jobs under {limit}: at most {most} started in one window, then {:.2}x the limit's rate",
        pace / limit.jobs_per_second()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_holds_in_every_window_across_three_workers() {
    let db = Db::new().await;
    let limit: RateLimit = "10/200ms".parse().unwrap();
    let ids = enqueue_record_runs(&db, 60).await;
    let mut workers = Vec::new();
    for _ in 0..3 {
        workers.push(start_rate_limited_worker(&db, &["record_run"], Some(limit)).await);
    }
    wait_all_done(&db, &ids).await;
    for worker in workers {
        worker.shutdown().await.unwrap();
    }
    check_drain_under(&db, "record_run", 60, limit).await;
    let slices: i32 = sqlx::query_scalar(
        "SELECT cardinality(started_at) FROM jobs_rate_limits WHERE kind = 'record_run'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(
        slices <= 65,
        "{slices} starts recorded: at most one per 1/64 of the window"
    );
    let window_secs: f64 =
        sqlx::query_scalar("SELECT window_secs FROM jobs_rate_limits WHERE kind = 'record_run'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(window_secs, 0.2, "the window enforced is recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_declared_on_the_job_holds_and_leaves_other_kinds_alone() {
    let db = Db::new().await;
    let declared = <rate_limited_record::Job as jobs::JobKind>::OPTIONS
        .rate_limit
        .expect("declared");
    let mut limited = Vec::new();
    for _ in 0..100 {
        limited.push(rate_limited_record::enqueue(&db.pool).await.unwrap().id());
    }
    let free = enqueue_record_runs(&db, 40).await;
    let worker = start_rate_limited_worker(&db, &["rate_limited_record", "record_run"], None).await;
    wait_all_done(&db, &free).await;
    let limited_done = db
        .count(
            "SELECT count(*) FROM jobs_queue WHERE kind = 'rate_limited_record' AND state = 'done'",
        )
        .await;
    assert!(
        limited_done < 100,
        "the kind without a limit drained without waiting for the limited one"
    );
    wait_all_done(&db, &limited).await;
    worker.shutdown().await.unwrap();
    check_drain_under(&db, "rate_limited_record", 100, declared).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_beyond_the_limit_wait_ready_until_the_window_allows() {
    let db = Db::new().await;
    let limit: RateLimit = "3/1h".parse().unwrap();
    let ids = enqueue_record_runs(&db, 5).await;
    let worker = start_rate_limited_worker(&db, &["record_run"], Some(limit)).await;
    db.wait_for_count(
        "three jobs done",
        "SELECT count(*) FROM jobs_queue WHERE state = 'done'",
        3,
    )
    .await;
    // Another worker, which has never claimed, finds the window full too (the starts are the
    // database's, not the first worker's).
    let now: f64 = sqlx::query_scalar("SELECT extract(epoch FROM now())::float8")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let second = start_rate_limited_worker(&db, &["record_run"], Some(limit)).await;
    wait_until("the second worker to record itself", || async {
        jobs::admin::live_workers(&db.pool).await.unwrap().len() == 2
    })
    .await;
    db.wait_for_clock_past("the second worker to claim", now, 0.3)
        .await;
    let held: Vec<(String, i32)> = db
        .rows("SELECT state::text, attempts FROM jobs_queue WHERE state <> 'done' ORDER BY id")
        .await;
    assert_eq!(
        held,
        vec![("ready".to_string(), 0); 2],
        "held back, not retried"
    );
    worker.shutdown().await.unwrap();
    second.shutdown().await.unwrap();
    assert_eq!(ids.len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attempt_counts_against_a_rate_limit() {
    let db = Db::new().await;
    // Fails its first attempt, retried 10-40 ms later; and one that succeeds at once.
    let retried = flaky::enqueue(&db.pool, 1).await.unwrap().id();
    let done = flaky::enqueue(&db.pool, 0).await.unwrap().id();
    let pool = db.other_pool(6).await;
    let worker = Worker::builder(pool.clone())
        .kinds(["flaky"])
        .state(pool)
        .config(fast_config())
        .rate_limit("flaky", "2/1h".parse().unwrap())
        .build()
        .expect("worker builds")
        .start();
    db.wait_for_state(done, "done").await;
    db.wait_for_count(
        "the first attempt of the retried job to fail",
        &format!("SELECT count(*) FROM jobs_queue WHERE id = {retried} AND attempts = 1 AND state = 'ready'"),
        1,
    )
    .await;
    let failed_at: f64 = sqlx::query_scalar("SELECT extract(epoch FROM now())::float8")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    db.wait_for_clock_past("the retry's backoff to pass", failed_at, 0.3)
        .await;
    assert_eq!(
        db.count("SELECT count(*) FROM runs").await,
        2,
        "two starts in the window: the retry waits for the next one"
    );
    let job = db.job(retried).await;
    assert_eq!((job.state.as_str(), job.attempts), ("ready", 1));
    worker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_window_records_its_starts_in_a_few_slices() {
    let db = Db::new().await;
    let limit: RateLimit = "1000/1h".parse().unwrap();
    let ids = enqueue_record_runs(&db, 100).await;
    let worker = start_rate_limited_worker(&db, &["record_run"], Some(limit)).await;
    wait_all_done(&db, &ids).await;
    worker.shutdown().await.unwrap();
    let (slices, started): (i32, i64) = sqlx::query_as(
        "SELECT cardinality(started_at), (SELECT sum(n) FROM unnest(started) AS n)::int8
         FROM jobs_rate_limits WHERE kind = 'record_run'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(started, 100, "every start recorded");
    assert!(
        slices <= 2,
        "{slices} starts recorded: claims within one 1/64 of the window share one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_given_at_run_time_name_a_kind_the_worker_runs() {
    let db = Db::new().await;
    let error = refusal(
        Worker::builder(db.pool.clone())
            .kinds(["record_run"])
            .state(db.pool.clone())
            .rate_limit("record_rnu", "1/1s".parse().unwrap()),
    );
    assert!(
        matches!(&error, WorkerError::LimitOfUnknownKind { kind, .. } if kind == "record_rnu"),
        "{error}"
    );
    assert_eq!(
        error.to_string(),
        "`.rate_limit(\"record_rnu\", ..)`: this worker runs no job kind `record_rnu` (it runs `record_run`)"
    );
    let error = refusal(
        Worker::builder(db.pool.clone())
            .kinds(["record_run"])
            .state(db.pool.clone())
            .max_running("record_run", 0),
    );
    assert_eq!(
        error.to_string(),
        "`.max_running(\"record_run\", 0)`: the limit must be at least 1, or no job of `record_run` would ever run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_show_each_limit_with_what_is_in_use_and_what_it_holds_back() {
    let db = Db::new().await;
    enqueue_record_runs(&db, 5).await;
    let limited = |pool: sqlx::PgPool, rate: &str| {
        Worker::builder(pool.clone())
            .kinds(["record_run"])
            .state(pool)
            .config(fast_config())
            .max_running("record_run", 5)
            .rate_limit("record_run", rate.parse().unwrap())
            .build()
            .expect("worker builds")
            .start()
    };
    let first = limited(db.other_pool(6).await, "3/1h");
    db.wait_for_count(
        "three jobs done",
        "SELECT count(*) FROM jobs_queue WHERE state = 'done'",
        3,
    )
    .await;
    let stats = admin_stats_with_live_workers(&db, 1).await;
    assert_eq!(stats.limits.len(), 1, "{:?}", stats.limits);
    let limit = &stats.limits[0];
    assert_eq!(limit.limits.kind, "record_run");
    assert_eq!(limit.limits.max_running, Some(5));
    assert_eq!(limit.limits.rate_limit, Some("3/1h".parse().unwrap()));
    assert_eq!(
        (
            limit.running,
            limit.started_in_window,
            limit.due,
            limit.held_back
        ),
        (0, 3, 2, 2),
        "the rate limit is used up and holds back the two due jobs"
    );
    assert!(limit.rate_limit_reached() && !limit.running_limit_reached());
    assert!(!limit.workers_disagree);

    // Due jobs in a paused queue are held back by the pause, not by the limit.
    jobs::admin::pause_queue(&db.pool, "default", "ops", None)
        .await
        .unwrap();
    let stats = jobs::admin::stats(&db.pool).await.unwrap();
    assert_eq!((stats.limits[0].due, stats.limits[0].held_back), (0, 0));
    jobs::admin::resume_queue(&db.pool, "default")
        .await
        .unwrap();

    let second = limited(db.other_pool(6).await, "4/1h");
    let stats = admin_stats_with_live_workers(&db, 2).await;
    assert!(stats.limits[0].workers_disagree, "{:?}", stats.limits);
    second.shutdown().await.unwrap();

    // A worker that runs the kind with no limit ignores the others' limits: they disagree too.
    let pool = db.other_pool(6).await;
    let unlimited = Worker::builder(pool.clone())
        .kinds(["record_run"])
        .state(pool)
        .config(fast_config())
        .build()
        .expect("worker builds")
        .start();
    wait_until("the unlimited worker to replace the second", || async {
        let workers = jobs::admin::live_workers(&db.pool).await.unwrap();
        workers.len() == 2 && workers.iter().any(|worker| worker.limits.is_empty())
    })
    .await;
    let stats = jobs::admin::stats(&db.pool).await.unwrap();
    assert!(stats.limits[0].workers_disagree, "{:?}", stats.limits);
    unlimited.shutdown().await.unwrap();
    first.shutdown().await.unwrap();
}

/// The stats, once `workers` live workers have recorded themselves.
async fn admin_stats_with_live_workers(db: &Db, workers: usize) -> jobs::admin::Stats {
    wait_until("the workers to record themselves", || async {
        jobs::admin::live_workers(&db.pool).await.unwrap().len() >= workers
    })
    .await;
    jobs::admin::stats(&db.pool).await.unwrap()
}

/// A worker of a kind limited to 4 running drains its backlog without waiting for a poll: its
/// slots free as soon as its outcomes are queued for writing, but the jobs count as running until
/// they are written, so claims meet the limit; the worker claims again when its outcomes are
/// written. It polls only every 30 s, so that a worker waiting for its next poll times out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_limit_claims_again_as_its_own_outcomes_are_written() {
    let db = Db::new().await;
    insert_due_record_runs(&db, 1_000, "backlog", "1 minute", "1 ms").await;
    let pool = db.other_pool(12).await;
    let worker = Worker::builder(pool.clone())
        .kinds(["record_run"])
        .state(pool)
        .config(WorkerConfig {
            poll_interval: Duration::from_secs(30),
            ..fast_config()
        })
        .max_running("record_run", 4)
        .build()
        .expect("worker builds")
        .start();
    db.wait_for_count(
        "the backlog drained",
        "SELECT count(*) FROM jobs_queue WHERE state = 'done'",
        1_000,
    )
    .await;
    worker.shutdown().await.unwrap();
    assert_eq!(db.count("SELECT count(*) FROM runs").await, 1_000);
}
