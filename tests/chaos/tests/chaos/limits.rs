//! Injects: a rate-limited backlog drained by three worker processes at once; a SIGKILL of a
//! worker running a kind's every allowed job, and one running a merchant's every allowed job.
//! Proves: the rate limit holds in every window of the jobs' start times (and prints the pace it
//! let the backlog start at); a running limit, of the kind or per key, counts a killed worker's
//! jobs until they are rescued, then frees their slots.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use jobs::{JobId, RateLimit};
use jobs_chaos::{
    per_key_limited_job, rate_limited_job, running_limited_job, MAX_RUNNING, MAX_RUNNING_PER_KEY,
    RATE_LIMIT,
};

use jobs_testkit::{most_started_in_any_window, pace_after_first_window};

use crate::support::{alone_on_shared_server, secs, wait_until, Figures};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_holds_across_three_worker_processes() {
    const JOBS: i64 = 300;
    let (_serial, db) = alone_on_shared_server().await;
    let limit: RateLimit = RATE_LIMIT.parse().unwrap();
    let mut ids: Vec<JobId> = Vec::new();
    for _ in 0..JOBS {
        ids.push(rate_limited_job::enqueue(&db.pool).await.unwrap().id());
    }
    let workers = [
        db.spawn_worker("first"),
        db.spawn_worker("second"),
        db.spawn_worker("third"),
    ];
    let started = Instant::now();
    let all: Vec<&_> = workers.iter().collect();
    db.wait_all_done(&ids, Duration::from_secs(60), &all).await;
    let drained = started.elapsed();

    let most = most_started_in_any_window(&db.pool, "rate_limited_job", limit.per())
        .await
        .unwrap();
    let pace = pace_after_first_window(&db.pool, "rate_limited_job", i64::from(limit.jobs()))
        .await
        .unwrap()
        / limit.jobs_per_second();
    let processes = db.scalar_i64("SELECT count(DISTINCT pid) FROM runs").await;
    let attempts = db
        .scalar_i64("SELECT sum(attempts)::int8 FROM jobs_queue WHERE kind = 'rate_limited_job'")
        .await;
    Figures::new("a rate limit across three worker processes")
        .add("limit", limit)
        .add("jobs", JOBS)
        .add("most started in one window", most)
        .add(
            "pace after the first window",
            format!("{pace:.2}x the limit's rate"),
        )
        .add("processes that ran jobs", processes)
        .add("drained in", secs(drained))
        .outcome(&db, db.lost(&ids).await.len())
        .await
        .print();
    assert!(
        most <= i64::from(limit.jobs()),
        "{most} jobs started within one window of {limit}"
    );
    assert_eq!(
        attempts, JOBS,
        "no job held back by the limit spent an attempt"
    );
    assert!(processes >= 2, "the workers shared the jobs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_limit_counts_a_killed_workers_jobs_until_they_are_rescued() {
    const JOBS: usize = 4;
    let (_serial, db) = alone_on_shared_server().await;
    let mut ids: Vec<JobId> = Vec::new();
    for _ in 0..JOBS {
        ids.push(
            running_limited_job::enqueue(&db.pool, 1_500)
                .await
                .unwrap()
                .id(),
        );
    }
    let mut victim = db.spawn_worker("victim");
    wait_until(
        "the victim to run the two jobs its limit allows",
        Duration::from_secs(20),
        &[&victim],
        || async { db.scalar_i64("SELECT count(*) FROM runs").await == MAX_RUNNING },
    )
    .await;
    let orphans = db.running_ids().await;
    victim.kill();
    let killed_at = db.now().await;
    let survivor = db.spawn_worker("survivor");
    // Sample how many jobs of the kind the database holds running until every job is done.
    let most_running = AtomicI64::new(0);
    wait_until(
        "every job done",
        Duration::from_secs(30),
        &[&survivor],
        || {
            let (db, most_running) = (&db, &most_running);
            async move {
                let running = db
                    .scalar_i64(
                        "SELECT count(*) FROM jobs_queue
                         WHERE kind = 'running_limited_job' AND state = 'running'",
                    )
                    .await;
                most_running.fetch_max(running, Ordering::Relaxed);
                db.count_in("done").await == JOBS as i64
            }
        },
    )
    .await;
    let most_running = most_running.into_inner();
    // When the first orphan was rescued, and when the survivor first started a job.
    let (rescued_at, survivor_started_at): (Option<f64>, Option<f64>) = sqlx::query_as(
        "SELECT (SELECT min(extract(epoch FROM (e->>'at')::timestamptz))::float8
                 FROM jobs_queue AS j, jsonb_array_elements(j.errors) AS e
                 WHERE j.id = ANY($1) AND e->>'kind' = 'lease_expired'),
                (SELECT min(extract(epoch FROM started_at))::float8 FROM runs WHERE pid = $2)",
    )
    .bind(orphans.iter().copied().collect::<Vec<JobId>>())
    .bind(i32::try_from(survivor.pid()).unwrap())
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let rescued_at = rescued_at.expect("the orphans were rescued");
    let survivor_started_at = survivor_started_at.expect("the survivor ran jobs");
    Figures::new("a running limit through a SIGKILL")
        .add("limit", format!("{MAX_RUNNING} running"))
        .add("jobs running when the victim was killed", orphans.len())
        .add("most running seen", most_running)
        .add(
            "first orphan rescued after the kill",
            format!("{:.2} s", rescued_at - killed_at),
        )
        .add(
            "survivor's first start after the kill",
            format!("{:.2} s", survivor_started_at - killed_at),
        )
        .outcome(&db, db.lost(&ids).await.len())
        .await
        .print();
    assert_eq!(
        orphans.len() as i64,
        MAX_RUNNING,
        "the victim held every slot"
    );
    assert!(
        most_running <= MAX_RUNNING,
        "{most_running} running at once"
    );
    assert!(
        survivor_started_at >= rescued_at,
        "the survivor started a job {:.3} s before the killed worker's jobs were rescued",
        rescued_at - survivor_started_at
    );
    assert!(db.lost(&ids).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_limit_counts_a_killed_workers_jobs_until_they_are_rescued() {
    let (_serial, db) = alone_on_shared_server().await;
    let mut ids: Vec<JobId> = Vec::new();
    for _ in 0..4 {
        ids.push(
            per_key_limited_job::enqueue(&db.pool, "a".to_owned(), 1_500)
                .await
                .unwrap()
                .id(),
        );
    }
    let mut victim = db.spawn_worker("victim");
    wait_until(
        "the victim to run the two jobs of merchant a its limit allows",
        Duration::from_secs(20),
        &[&victim],
        || async { db.scalar_i64("SELECT count(*) FROM runs").await == MAX_RUNNING_PER_KEY },
    )
    .await;
    let orphans = db.running_ids().await;
    victim.kill();
    let killed_at = db.now().await;
    // Merchant b's jobs, enqueued after the kill: a's slots are not theirs.
    for _ in 0..2 {
        ids.push(
            per_key_limited_job::enqueue(&db.pool, "b".to_owned(), 0)
                .await
                .unwrap()
                .id(),
        );
    }
    let survivor = db.spawn_worker("survivor");
    let jobs = ids.len() as i64;
    // Sample how many jobs of each merchant the database holds running until every job is done.
    let most_running = AtomicI64::new(0);
    wait_until(
        "every job done",
        Duration::from_secs(30),
        &[&survivor],
        || {
            let (db, most_running) = (&db, &most_running);
            async move {
                let running = db
                    .scalar_i64(
                        "SELECT coalesce(max(running), 0) FROM (
                             SELECT count(*) AS running FROM jobs_queue
                             WHERE kind = 'per_key_limited_job' AND state = 'running'
                             GROUP BY limit_key) AS per_key",
                    )
                    .await;
                most_running.fetch_max(running, Ordering::Relaxed);
                db.count_in("done").await == jobs
            }
        },
    )
    .await;
    let most_running = most_running.into_inner();
    // When the first orphan was rescued, when the survivor first started a job of merchant a,
    // and when it first started one of merchant b.
    let (rescued_at, a_started_at, b_started_at): (Option<f64>, Option<f64>, Option<f64>) =
        sqlx::query_as(
            "SELECT (SELECT min(extract(epoch FROM (e->>'at')::timestamptz))::float8
                     FROM jobs_queue AS j, jsonb_array_elements(j.errors) AS e
                     WHERE j.id = ANY($1) AND e->>'kind' = 'lease_expired'),
                    (SELECT min(extract(epoch FROM r.started_at))::float8
                     FROM runs AS r JOIN jobs_queue AS j ON j.id = r.job_id
                     WHERE r.pid = $2 AND j.limit_key = '\"a\"'),
                    (SELECT min(extract(epoch FROM r.started_at))::float8
                     FROM runs AS r JOIN jobs_queue AS j ON j.id = r.job_id
                     WHERE j.limit_key = '\"b\"')",
        )
        .bind(orphans.iter().copied().collect::<Vec<JobId>>())
        .bind(i32::try_from(survivor.pid()).unwrap())
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let rescued_at = rescued_at.expect("the orphans were rescued");
    let a_started_at = a_started_at.expect("the survivor ran merchant a's jobs");
    let b_started_at = b_started_at.expect("merchant b's jobs ran");
    Figures::new("a per-key limit through a SIGKILL")
        .add(
            "limit",
            format!("{MAX_RUNNING_PER_KEY} running per merchant"),
        )
        .add(
            "jobs of merchant a running when the victim was killed",
            orphans.len(),
        )
        .add("most of one merchant running seen", most_running)
        .add(
            "first orphan rescued after the kill",
            format!("{:.2} s", rescued_at - killed_at),
        )
        .add(
            "survivor's first start of merchant a after the kill",
            format!("{:.2} s", a_started_at - killed_at),
        )
        .add(
            "first start of merchant b after the kill",
            format!("{:.2} s", b_started_at - killed_at),
        )
        .outcome(&db, db.lost(&ids).await.len())
        .await
        .print();
    assert_eq!(
        orphans.len() as i64,
        MAX_RUNNING_PER_KEY,
        "the victim held every slot of merchant a"
    );
    assert!(
        most_running <= MAX_RUNNING_PER_KEY,
        "{most_running} of one merchant running at once"
    );
    assert!(
        a_started_at >= rescued_at,
        "the survivor started a job of merchant a {:.3} s before the killed worker's jobs were rescued",
        rescued_at - a_started_at
    );
    assert!(db.lost(&ids).await.is_empty());
}
