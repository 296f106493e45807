//! Injects: SIGKILL, five times, on one of two worker processes draining 5,000 jobs (restarted
//! each time). Proves: every job completes, none is lost, and the jobs run more than once are
//! among those the killed process had in flight; the orphans come back within the lease plus a
//! rescue sweep.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use jobs::JobId;

use crate::support::{alone_on_shared_server, kill_victims, secs, Figures, Kill};

const JOBS: usize = 5_000;
const KILLS: usize = 5;
/// Runs the victim does after each start before it is killed, so that it dies mid-work.
const RUNS_BEFORE_KILL: i64 = 200;

/// One kill, and what the victim had in flight: running at the kill, and run by the victim.
struct KillInFlight {
    kill: Kill,
    in_flight: BTreeSet<JobId>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_five_times_while_draining_loses_nothing() {
    let (_serial, db) = alone_on_shared_server().await;
    let ids = db.enqueue_chaos_jobs(JOBS, 10).await;
    let started = Instant::now();
    let (steady, victim, killed) = kill_victims(&db, KILLS, RUNS_BEFORE_KILL).await;
    db.wait_all_done(&ids, Duration::from_secs(60), &[&steady, &victim])
        .await;
    let drained = started.elapsed();
    // Only now: a statement the victim sent just before it died may have been committed by
    // the server just after (such as the insert recording a run).
    let mut kills = Vec::new();
    for kill in killed {
        let ran_there = db.run_by(kill.pid).await;
        let in_flight = kill.running.intersection(&ran_there).copied().collect();
        kills.push(KillInFlight { kill, in_flight });
    }

    let lost = db.lost(&ids).await;
    let rerun = db.run_more_than_once().await;
    let in_flight: BTreeSet<JobId> = kills
        .iter()
        .flat_map(|kill| kill.in_flight.clone())
        .collect();
    let mut back = Vec::new();
    let mut done = Vec::new();
    for kill in &kills {
        let ids: Vec<JobId> = kill.in_flight.iter().copied().collect();
        let (rescued, finished): (Option<f64>, Option<f64>) = sqlx::query_as(
            "SELECT max(rescued_at), max(finished_at) FROM (
                 SELECT (SELECT min(extract(epoch FROM (e->>'at')::timestamptz))::float8
                         FROM jsonb_array_elements(j.errors) AS e
                         WHERE e->>'kind' = 'lease_expired'
                           AND (e->>'at')::timestamptz >= to_timestamp($2)) AS rescued_at,
                        extract(epoch FROM j.finished_at)::float8 AS finished_at
                 FROM jobs_queue j WHERE j.id = ANY($1)) AS orphans",
        )
        .bind(&ids)
        .bind(kill.kill.at_epoch)
        .fetch_one(&db.pool)
        .await
        .expect("rescue and finish times");
        back.push(rescued.map_or(0.0, |at| at - kill.kill.at_epoch));
        done.push(finished.map_or(0.0, |at| at - kill.kill.at_epoch));
    }
    let list = |seconds: &[f64]| {
        seconds
            .iter()
            .map(|seconds| format!("{seconds:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
            + " s"
    };
    let extra_runs: i64 = rerun.values().map(|runs| runs - 1).sum();
    Figures::new("SIGKILL x5 during a drain of 5,000 jobs (2 workers, lease 2 s)")
        .add("jobs enqueued", JOBS)
        .add("completed", db.count_in("done").await)
        .add("lost", lost.len())
        .add(
            "in flight at the kills",
            format!(
                "{} ({})",
                kills.iter().map(|kill| kill.in_flight.len()).sum::<usize>(),
                kills
                    .iter()
                    .map(|kill| kill.in_flight.len().to_string())
                    .collect::<Vec<_>>()
                    .join(" + ")
            ),
        )
        .add(
            "run more than once",
            format!("{} jobs, {extra_runs} extra runs", rerun.len()),
        )
        .add("rescued (lease expired)", db.rescued().await)
        .add("time to recover: kill -> orphans ready", list(&back))
        .add("kill -> orphans done (behind the backlog)", list(&done))
        .add("drain time", secs(drained))
        .print();

    assert!(lost.is_empty(), "lost jobs: {lost:?}");
    let unexplained: Vec<&JobId> = rerun.keys().filter(|id| !in_flight.contains(id)).collect();
    assert!(
        unexplained.is_empty(),
        "jobs ran more than once without being in flight at a kill: {unexplained:?}"
    );
    assert!(rerun.len() <= in_flight.len());
}
