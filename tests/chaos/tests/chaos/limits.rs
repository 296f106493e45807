//! Injects: a rate-limited backlog drained by three worker processes at once; a SIGKILL of a
//! worker running a kind's every allowed job, and one running a merchant's every allowed job.
//! Proves: the rate limit holds in every window of the jobs' start times (and prints the pace it
//! let the backlog start at); a running limit, of the kind or per key, counts a killed worker's
//! jobs until they are rescued, then frees their slots.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use jobs::{JobId, RateLimit};
use jobs_chaos::{
    per_key_limited_job, rate_limited_job, running_limited_job, MAX_RUNNING, MAX_RUNNING_PER_KEY,
    RATE_LIMIT,
};

use jobs_testkit::{most_started_in_any_window, pace_after_first_window};

use crate::support::{alone_on_shared_server, ids_of, secs, wait_until, ChaosDb, Figures};

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

/// What a SIGKILL of a worker holding every slot a running limit allows showed.
struct ThroughASigkill {
    /// Every job enqueued, before the kill and after it.
    ids: Vec<JobId>,
    /// The jobs the killed worker was running.
    orphans: BTreeSet<JobId>,
    /// When the victim was killed, by the database's clock (epoch seconds).
    killed_at: f64,
    /// The most running at once under the limit, sampled while the survivor ran the rest.
    most_running: i64,
    /// Seconds from the kill to the first orphan's rescue.
    rescued_after: f64,
    /// Seconds from the kill to the survivor's first start of a job the orphans' slots held.
    held_started_after: f64,
}

/// Lets a victim worker run `ids` (jobs of a kind whose limit lets `limit` run at once, each long
/// enough to hold its slot) until it runs `limit` of them, SIGKILLs it, enqueues the jobs of
/// `after_kill`, and lets a survivor run every job, sampling `running_sql` (the most running at
/// once under the limit) until all are done. `held` is an SQL condition on `j` (`jobs_queue`)
/// selecting the jobs the orphans' slots hold back.
async fn kill_while_the_limit_is_full(
    db: &ChaosDb,
    mut ids: Vec<JobId>,
    limit: i64,
    running_sql: &str,
    held: &str,
    after_kill: impl AsyncFnOnce() -> Vec<JobId>,
) -> ThroughASigkill {
    let mut victim = db.spawn_worker("victim");
    wait_until(
        "the victim to run the jobs the limit allows",
        Duration::from_secs(20),
        &[&victim],
        || async { db.scalar_i64("SELECT count(*) FROM runs").await == limit },
    )
    .await;
    let orphans = db.running_ids().await;
    victim.kill();
    let killed_at = db.now().await;
    ids.extend(after_kill().await);
    let survivor = db.spawn_worker("survivor");
    let jobs = ids.len() as i64;
    let most_running = AtomicI64::new(0);
    wait_until(
        "every job done",
        Duration::from_secs(30),
        &[&survivor],
        || {
            let most_running = &most_running;
            async move {
                most_running.fetch_max(db.scalar_i64(running_sql).await, Ordering::Relaxed);
                db.count_in("done").await == jobs
            }
        },
    )
    .await;
    let (rescued_at, held_started_at): (Option<f64>, Option<f64>) = sqlx::query_as(&format!(
        "SELECT (SELECT min(extract(epoch FROM (e->>'at')::timestamptz))::float8
                 FROM jobs_queue AS j, jsonb_array_elements(j.errors) AS e
                 WHERE j.id = ANY($1) AND e->>'kind' = 'lease_expired'),
                (SELECT min(extract(epoch FROM r.started_at))::float8
                 FROM runs AS r JOIN jobs_queue AS j ON j.id = r.job_id
                 WHERE r.pid = $2 AND {held})"
    ))
    .bind(orphans.iter().copied().collect::<Vec<JobId>>())
    .bind(i32::try_from(survivor.pid()).unwrap())
    .fetch_one(&db.pool)
    .await
    .unwrap();
    ThroughASigkill {
        ids,
        orphans,
        killed_at,
        most_running: most_running.into_inner(),
        rescued_after: rescued_at.expect("the orphans were rescued") - killed_at,
        held_started_after: held_started_at.expect("the survivor ran the held jobs") - killed_at,
    }
}

/// Prints what `kill` showed as `title`, with `extra` figures, and checks it: the victim held
/// every one of the `limit` slots, never more than `limit` ran at once, the survivor started no
/// held job before the orphans' rescue, and no job was lost.
async fn check_through_a_sigkill(
    db: &ChaosDb,
    title: &'static str,
    limit: i64,
    kill: &ThroughASigkill,
    extra: &[(&str, String)],
) {
    let lost = db.lost(&kill.ids).await;
    let mut figures = Figures::new(title);
    figures
        .add("limit", format!("{limit} running"))
        .add(
            "jobs running when the victim was killed",
            kill.orphans.len(),
        )
        .add("most running seen", kill.most_running)
        .add(
            "first orphan rescued after the kill",
            format!("{:.2} s", kill.rescued_after),
        )
        .add(
            "survivor's first start of a held job after the kill",
            format!("{:.2} s", kill.held_started_after),
        );
    for (name, value) in extra {
        figures.add(name, value);
    }
    figures.outcome(db, lost.len()).await.print();
    assert_eq!(
        kill.orphans.len() as i64,
        limit,
        "the victim held every slot"
    );
    assert!(
        kill.most_running <= limit,
        "{} running at once",
        kill.most_running
    );
    assert!(
        kill.held_started_after >= kill.rescued_after,
        "the survivor started a held job {:.3} s before the killed worker's jobs were rescued",
        kill.rescued_after - kill.held_started_after
    );
    assert!(lost.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_limit_counts_a_killed_workers_jobs_until_they_are_rescued() {
    let (_serial, db) = alone_on_shared_server().await;
    let ids = ids_of(
        running_limited_job::enqueue_many(
            &db.pool,
            (0..4).map(|_| running_limited_job::Args { sleep_ms: 1_500 }),
        )
        .await,
    );
    let kill = kill_while_the_limit_is_full(
        &db,
        ids,
        MAX_RUNNING,
        "SELECT count(*) FROM jobs_queue
         WHERE kind = 'running_limited_job' AND state = 'running'",
        "true",
        async || Vec::new(),
    )
    .await;
    check_through_a_sigkill(
        &db,
        "a running limit through a SIGKILL",
        MAX_RUNNING,
        &kill,
        &[],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_limit_counts_a_killed_workers_jobs_until_they_are_rescued() {
    let (_serial, db) = alone_on_shared_server().await;
    let merchant = |merchant: &'static str, count: usize, sleep_ms: u64| {
        let jobs = (0..count).map(move |_| per_key_limited_job::Args {
            merchant: merchant.to_owned(),
            sleep_ms,
        });
        per_key_limited_job::enqueue_many(&db.pool, jobs)
    };
    let ids = ids_of(merchant("a", 4, 1_500).await);
    // Merchant b's jobs, enqueued after the kill: a's slots are not theirs.
    let enqueue_b = async || ids_of(merchant("b", 2, 0).await);
    let kill = kill_while_the_limit_is_full(
        &db,
        ids,
        MAX_RUNNING_PER_KEY,
        "SELECT coalesce(max(running), 0) FROM (
             SELECT count(*) AS running FROM jobs_queue
             WHERE kind = 'per_key_limited_job' AND state = 'running'
             GROUP BY limit_key) AS per_key",
        "j.limit_key = '\"a\"'",
        enqueue_b,
    )
    .await;
    let b_started_at: Option<f64> = sqlx::query_scalar(
        "SELECT min(extract(epoch FROM r.started_at))::float8
         FROM runs AS r JOIN jobs_queue AS j ON j.id = r.job_id
         WHERE j.limit_key = '\"b\"'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let b_started_after = b_started_at.expect("merchant b's jobs ran") - kill.killed_at;
    check_through_a_sigkill(
        &db,
        "a per-key limit through a SIGKILL (merchant a's slots)",
        MAX_RUNNING_PER_KEY,
        &kill,
        &[(
            "first start of merchant b after the kill",
            format!("{b_started_after:.2} s"),
        )],
    )
    .await;
}
