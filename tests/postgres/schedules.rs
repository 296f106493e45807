//! Scheduled jobs: missed ticks after downtime by policy, no overlap for a kind limited to one
//! running job, the alarm on a schedule that stops succeeding, and schedules a worker refuses.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use jobs::admin::{self, HealthThresholds, Violation};
use jobs::{
    job, JobContext, JobError, JobResult, MissedTicks, Schedule, State, Worker, WorkerError,
};
use sqlx::PgPool;

use crate::support::{fast_config, refusal, wait_until, Db};

/// Records its run.
#[job(max_attempts = 1)]
pub async fn tick(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    sqlx::query("INSERT INTO runs (job_id, attempt) VALUES ($1, $2)")
        .bind(ctx.id())
        .bind(i32::try_from(ctx.attempt()).unwrap_or(i32::MAX))
        .execute(&*pool)
        .await?;
    Ok(())
}

/// Always fails for good.
#[job(max_attempts = 1)]
pub async fn failing_tick() -> JobResult {
    Err(JobError::permanent("the report's source is gone"))
}

/// Records when it starts and ends, working 1.5 s in between: longer than its period.
#[job(max_attempts = 1, max_running = 1)]
pub async fn slow_tick(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    let started: DateTime<Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(&*pool)
        .await?;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    sqlx::query("INSERT INTO spans (job_id, started, ended) VALUES ($1, $2, clock_timestamp())")
        .bind(ctx.id())
        .bind(started)
        .execute(&*pool)
        .await?;
    Ok(())
}

/// Declares its schedule in the attribute.
#[job(every = "1s", missed = "skip", max_attempts = 1)]
pub async fn declared_tick(ctx: JobContext, pool: State<PgPool>) -> JobResult {
    tick(ctx, pool).await
}

fn every_second(kind: &str, missed: MissedTicks) -> Schedule {
    Schedule::every(kind, Duration::from_secs(1))
        .unwrap()
        .missed(missed)
}

fn start(pool: PgPool, schedule: Schedule) -> jobs::WorkerHandle {
    Worker::builder(pool.clone())
        .kinds([schedule.kind().to_string()])
        .state(pool)
        .schedule(schedule)
        .config(fast_config())
        .build()
        .expect("worker builds")
        .start()
}

async fn database_now(pool: &PgPool) -> DateTime<Utc> {
    sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The ticks (`run_at`) of the schedule's jobs created at or after `since`, with their creation
/// times, oldest tick first.
async fn ticks_created_since(
    pool: &PgPool,
    since: DateTime<Utc>,
) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
    sqlx::query_as(
        "SELECT run_at, created_at FROM jobs_queue
         WHERE schedule IS NOT NULL AND created_at >= $1 ORDER BY run_at",
    )
    .bind(since)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Runs two workers with an every-second schedule until two ticks are done, stops both for
/// five ticks, starts one again, checks that six ticks or more passed between the latest tick
/// enqueued before the stop and the first pass after the restart, and returns (that latest
/// tick, the ticks that pass enqueued, the whole second of the database's clock at that pass).
async fn stop_for_five_ticks(
    missed: MissedTicks,
) -> (DateTime<Utc>, Vec<DateTime<Utc>>, DateTime<Utc>) {
    let db = Db::new().await;
    let other = db.other_pool(5).await;
    let first = start(db.pool.clone(), every_second("tick", missed));
    let second = start(other.clone(), every_second("tick", missed));
    db.wait_for_count_at_least("two ticks to run", "SELECT count(*) FROM runs", 2)
        .await;
    first.shutdown().await.expect("the worker stops");
    second.shutdown().await.expect("the worker stops");
    let stopped_at = database_now(&db.pool).await;
    let last_before: DateTime<Utc> =
        sqlx::query_scalar("SELECT max(run_at) FROM jobs_queue WHERE schedule IS NOT NULL")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let resume_at = stopped_at + TimeDelta::seconds(6);
    wait_until("five ticks to pass with no scheduler", || async {
        database_now(&db.pool).await >= resume_at
    })
    .await;
    let restarted_at = database_now(&db.pool).await;
    let again = start(db.pool.clone(), every_second("tick", missed));
    wait_until("the restarted scheduler's first pass", || async {
        !ticks_created_since(&db.pool, restarted_at).await.is_empty()
    })
    .await;
    again.shutdown().await.expect("the worker stops");
    let created = ticks_created_since(&db.pool, restarted_at).await;
    let first_pass = created.iter().map(|(_, created)| *created).min().unwrap();
    let ticks: Vec<DateTime<Utc>> = created
        .iter()
        .filter(|(_, created)| *created == first_pass)
        .map(|(tick, _)| *tick)
        .collect();
    let on_time = whole_second(first_pass);
    assert!(
        on_time - last_before >= TimeDelta::seconds(6),
        "{last_before} {on_time}"
    );
    (last_before, ticks, on_time)
}

/// `at`, its fraction of a second dropped.
fn whole_second(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(at.timestamp(), 0).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_downtime_the_latest_missed_tick_runs_once() {
    let (_, ticks, on_time) = stop_for_five_ticks(MissedTicks::Latest).await;
    assert_eq!(ticks, [on_time - TimeDelta::seconds(1), on_time]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_downtime_skip_runs_no_missed_tick() {
    let (_, ticks, on_time) = stop_for_five_ticks(MissedTicks::Skip).await;
    assert_eq!(ticks, [on_time]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_downtime_all_runs_every_missed_tick_up_to_its_bound() {
    let (last_before, ticks, on_time) = stop_for_five_ticks(MissedTicks::All { max: 100 }).await;
    let gap = (on_time - last_before).num_seconds();
    let every_tick: Vec<DateTime<Utc>> = (1..=gap)
        .map(|second| last_before + TimeDelta::seconds(second))
        .collect();
    assert_eq!(ticks, every_tick);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_limited_to_one_running_job_never_overlaps() {
    let db = Db::new().await;
    db.execute("CREATE TABLE spans (job_id bigint NOT NULL, started timestamptz NOT NULL, ended timestamptz NOT NULL)").await;
    let other = db.other_pool(5).await;
    let workers: Vec<_> = [db.pool.clone(), other]
        .into_iter()
        .map(|pool| {
            Worker::builder(pool.clone())
                .kinds(["slow_tick"])
                .state(pool)
                .schedule(every_second("slow_tick", MissedTicks::Latest))
                .config(fast_config())
                .build()
                .unwrap()
                .start()
        })
        .collect();
    // Every second a job is due, and each takes 1.5 s: jobs queue up, and two idle workers
    // with free slots keep trying to claim them.
    let most_running = AtomicI64::new(0);
    wait_until("four runs to end", || async {
        most_running.fetch_max(
            db.count(
                "SELECT count(*) FROM jobs_queue WHERE kind = 'slow_tick' AND state = 'running'",
            )
            .await,
            Ordering::SeqCst,
        );
        db.count("SELECT count(*) FROM spans").await >= 4
    })
    .await;
    for worker in workers {
        worker.shutdown().await.expect("the worker stops");
    }
    let overlapping = db
        .count(
            "SELECT count(*) FROM spans a JOIN spans b
             ON a.job_id < b.job_id AND a.started < b.ended AND b.started < a.ended",
        )
        .await;
    assert_eq!(overlapping, 0, "two runs overlapped");
    assert_eq!(most_running.into_inner(), 1);
    let waiting = db
        .count("SELECT count(*) FROM jobs_queue WHERE kind = 'slow_tick' AND state = 'ready'")
        .await;
    assert!(waiting >= 1, "the ticks queue up behind the running job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_whose_runs_keep_failing_is_reported_missing() {
    let db = Db::new().await;
    let schedule = Schedule::every("failing_tick", Duration::from_secs(1))
        .unwrap()
        .named("nightly_report");
    let worker = start(db.pool.clone(), schedule);
    let thresholds = HealthThresholds {
        schedule_grace: Duration::from_millis(500),
        max_dead: u64::MAX,
        ..HealthThresholds::default()
    };
    let found = Mutex::new(Vec::new());
    wait_until("the schedule to be reported missing", || async {
        let stats = admin::stats(&db.pool).await.unwrap();
        let violations = admin::check(&stats, &thresholds);
        let missing = !violations.is_empty();
        *found.lock().unwrap() = violations;
        missing
    })
    .await;
    worker.shutdown().await.expect("the worker stops");
    let violations = found.into_inner().unwrap();
    let [Violation::ScheduleMissing {
        schedule,
        kind,
        ticks,
        last_success,
        ..
    }] = violations.as_slice()
    else {
        panic!("{violations:?}");
    };
    assert_eq!(
        (schedule.as_str(), kind.as_str()),
        ("nightly_report", "failing_tick")
    );
    assert_eq!(*ticks, 2);
    assert_eq!(*last_success, None);
    let line = violations[0].to_string();
    assert!(
        line.starts_with("schedule_missing: schedule nightly_report (kind failing_tick, every 1s) has missed 2 runs in a row (no success since it was registered)"),
        "{line}"
    );
    assert!(
        db.count("SELECT count(*) FROM jobs_queue WHERE kind = 'failing_tick' AND state = 'dead'")
            .await
            >= 2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_succeeding_schedule_is_healthy_and_records_its_success() {
    let db = Db::new().await;
    let worker = start(db.pool.clone(), every_second("tick", MissedTicks::Latest));
    db.wait_for_count_at_least("three ticks to run", "SELECT count(*) FROM runs", 3)
        .await;
    let stats = admin::stats(&db.pool).await.unwrap();
    worker.shutdown().await.expect("the worker stops");
    let thresholds = HealthThresholds {
        schedule_grace: Duration::from_millis(500),
        ..HealthThresholds::default()
    };
    assert_eq!(admin::check(&stats, &thresholds), []);
    let [schedule] = stats.schedules.as_slice() else {
        panic!("{:?}", stats.schedules);
    };
    assert_eq!(schedule.name, "tick");
    assert_eq!(schedule.description, "every 1s");
    assert!(schedule.last_success_ago().unwrap() < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_refuses_schedules_it_cannot_run() {
    let db = Db::new().await;
    let build = |schedules: Vec<Schedule>| {
        let mut builder = Worker::builder(db.pool.clone())
            .kinds(["tick", "record_run"])
            .state(db.pool.clone());
        for schedule in schedules {
            builder = builder.schedule(schedule);
        }
        refusal(builder)
    };
    let unknown = build(vec![every_second("bad_input", MissedTicks::Latest)]);
    assert!(
        matches!(unknown, WorkerError::ScheduleOfUnknownKind { .. }),
        "{unknown}"
    );
    let with_arguments = build(vec![every_second("record_run", MissedTicks::Latest)]);
    assert_eq!(
        with_arguments.to_string(),
        "schedule `record_run` enqueues job kind `record_run`, which takes data arguments: a schedule can only enqueue kinds without them"
    );
    let twice = build(vec![
        every_second("tick", MissedTicks::Latest),
        Schedule::cron("tick", "0 3 * * *", "UTC").unwrap(),
    ]);
    assert_eq!(
        twice.to_string(),
        "two schedules are named `tick`: give one another name with `Schedule::named`"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_declared_in_the_attribute_runs() {
    let db = Db::new().await;
    let worker = Worker::builder(db.pool.clone())
        .kinds(["declared_tick"])
        .state(db.pool.clone())
        .config(fast_config())
        .build()
        .unwrap();
    let described: Vec<String> = worker.schedules().iter().map(ToString::to_string).collect();
    assert_eq!(described, ["declared_tick (declared_tick, every 1s)"]);
    assert_eq!(worker.schedules()[0].missed_ticks(), MissedTicks::Skip);
    let worker = worker.start();
    db.wait_for_count_at_least("two declared ticks to run", "SELECT count(*) FROM runs", 2)
        .await;
    worker.shutdown().await.expect("the worker stops");
    let runs = db
        .count(
            "SELECT count(*) FROM jobs_queue WHERE schedule = 'declared_tick' AND state = 'done'",
        )
        .await;
    assert!(runs >= 2, "{runs} declared ticks done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_schedule_row_is_removed_registers_it_again_and_goes_on() {
    let db = Db::new().await;
    // Every tick runs, late or not: the ticks across the removal can be counted exactly.
    let worker = start(
        db.pool.clone(),
        every_second("tick", MissedTicks::All { max: 100 }),
    );
    db.wait_for_count_at_least("a tick to run", "SELECT count(*) FROM runs", 1)
        .await;
    let removal = admin::remove_schedule(&db.pool, "tick", admin::Removal::Force)
        .await
        .unwrap();
    assert_eq!(removal, admin::ScheduleRemoval::Removed);
    let removed_at = database_now(&db.pool).await;
    db.wait_for_count(
        "the schedule to be registered again",
        "SELECT count(*) FROM jobs_schedules WHERE name = 'tick'",
        1,
    )
    .await;
    wait_until(
        "three ticks after the removal to be enqueued and run",
        || async {
            ticks_created_since(&db.pool, removed_at).await.len() >= 3
            && db
                .count("SELECT count(*) FROM jobs_queue WHERE schedule = 'tick' AND state = 'done'")
                .await
                >= 4
        },
    )
    .await;
    worker.shutdown().await.expect("the worker stops");
    // No tick was lost across the removal: the ticks enqueued are consecutive seconds, the
    // ones that came due while the row was missing included.
    let ticks: Vec<DateTime<Utc>> = db
        .column("SELECT run_at FROM jobs_queue WHERE schedule = 'tick' ORDER BY run_at")
        .await;
    assert!(
        ticks
            .windows(2)
            .all(|pair| pair[1] - pair[0] == TimeDelta::seconds(1)),
        "{ticks:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_schedule_still_kept_up_with_needs_force() {
    let db = Db::new().await;
    let worker = start(db.pool.clone(), every_second("tick", MissedTicks::Latest));
    db.wait_for_count_at_least("a tick to run", "SELECT count(*) FROM runs", 1)
        .await;
    let refused = admin::remove_schedule(&db.pool, "tick", admin::Removal::IfInactive)
        .await
        .unwrap();
    assert!(
        matches!(refused, admin::ScheduleRemoval::Active { .. }),
        "{refused:?}"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_schedules WHERE name = 'tick'")
            .await,
        1
    );
    worker.shutdown().await.expect("the worker stops");
    // Once no worker keeps it up for two ticks, it goes without force.
    db.execute("UPDATE jobs_schedules SET last_tick_at = last_tick_at - interval '3 seconds'")
        .await;
    assert_eq!(
        admin::remove_schedule(&db.pool, "tick", admin::Removal::IfInactive)
            .await
            .unwrap(),
        admin::ScheduleRemoval::Removed
    );
    assert_eq!(
        admin::remove_schedule(&db.pool, "tick", admin::Removal::IfInactive)
            .await
            .unwrap(),
        admin::ScheduleRemoval::NotFound
    );
}
