//! Injects: four worker processes running the same every-second schedule for 10 s, then
//! SIGTERM. Proves: each tick became exactly one job, none was skipped, and all completed.

use std::time::Duration;

use crate::support::{alone_on_shared_server, wait_until, Figures, Worker};

const PROCESSES: usize = 4;
const SECONDS: f64 = 10.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_turn_each_tick_into_exactly_one_job() {
    let (_serial, db) = alone_on_shared_server().await;
    let mut settings = db.settings();
    settings.schedule_every = Some(Duration::from_secs(1));
    let mut workers: Vec<Worker> = (1..=PROCESSES)
        .map(|n| Worker::spawn(&format!("scheduler-{n}"), &settings))
        .collect();
    for worker in &workers {
        worker
            .wait_for_log("schedule registered", Duration::from_secs(20))
            .await;
    }
    let started = db.now().await;
    let all: Vec<&Worker> = workers.iter().collect();
    wait_until(
        &format!("{SECONDS} s of ticks"),
        Duration::from_secs(30),
        &all,
        || async { db.now().await >= started + SECONDS },
    )
    .await;
    wait_until(
        "the window's tick jobs to complete",
        Duration::from_secs(30),
        &all,
        || async {
            db.scalar_i64(&format!(
                "SELECT count(*) FROM jobs_queue WHERE schedule = 'chaos_tick' AND state <> 'done'
                 AND run_at > to_timestamp({started}) AND run_at <= to_timestamp({})",
                started + SECONDS
            ))
            .await
                == 0
        },
    )
    .await;
    drop(all);
    for worker in &workers {
        worker.signal("TERM");
    }
    for worker in &mut workers {
        assert!(worker.wait_exit(Duration::from_secs(30)).await.success());
    }

    // Every whole second after the workers were all up, up to the stop.
    let (ticks, jobs, duplicated, first, last, done): (i64, i64, i64, f64, f64, i64) =
        sqlx::query_as(
            "SELECT count(DISTINCT run_at), count(*),
                    (SELECT count(*) FROM (SELECT run_at FROM jobs_queue
                        WHERE schedule IS NOT NULL GROUP BY run_at HAVING count(*) > 1) AS twice),
                    extract(epoch FROM min(run_at))::float8, extract(epoch FROM max(run_at))::float8,
                    count(*) FILTER (WHERE state = 'done')
             FROM jobs_queue WHERE schedule = 'chaos_tick'
               AND run_at > to_timestamp($1) AND run_at <= to_timestamp($2)",
        )
        .bind(started)
        .bind(started + SECONDS)
        .fetch_one(&db.pool)
        .await
        .expect("ticks");
    let expected = (last - first).round() + 1.0;
    let processes_ran = db.scalar_i64("SELECT count(DISTINCT pid) FROM runs").await;
    Figures::new("4 worker processes scheduling the same every-second schedule for 10 s")
        .add("ticks after all were up", ticks)
        .add("jobs for those ticks", jobs)
        .add("ticks with more than one job", duplicated)
        .add("ticks between the first and last, expected", expected)
        .add("completed", done)
        .add("processes that ran tick jobs", processes_ran)
        .print();

    assert!(ticks >= 9, "only {ticks} ticks in {SECONDS} s");
    assert_eq!(duplicated, 0, "a tick became more than one job");
    assert_eq!(jobs, ticks, "one job per tick");
    #[allow(clippy::cast_precision_loss)]
    let counted = ticks as f64;
    assert!(
        (counted - expected).abs() < f64::EPSILON,
        "a tick was skipped"
    );
    assert_eq!(done, jobs, "every tick's job completed");
}
