//! Injects: SIGKILL, again and again, on one of three worker processes draining a batch of
//! 10,000 members with a callback (restarted after each kill, killed again once it has run
//! another share of the members), until the batch ends. The killed worker runs members only;
//! the two others run members and the callback. Proves: every member ends done (nothing lost),
//! the callback runs exactly once, and only after the last member ended, seeing 10,000 done;
//! members run twice are among those a killed worker had in flight.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use jobs::postgres::batch::batch_outcome_by_id;
use jobs::{Batch, JobId};
use jobs_chaos::{batch_ended, chaos_job};

use crate::support::{alone_on_shared_server, secs, wait_until, Figures, Worker};

const MEMBERS: usize = 10_000;
/// How long each member works.
const MEMBER_MS: u64 = 5;
/// Runs a victim does after its start before it is killed: a second or two of its share of the
/// drain, so that it dies mid-work many times before the batch ends.
const RUNS_BEFORE_KILL: i64 = 150;
/// Kills at most: the batch ends long before on any machine that drains it in time.
const MAX_KILLS: usize = 60;

/// A run of the batch's callback, as it recorded itself in `callbacks`.
#[derive(Debug, sqlx::FromRow)]
struct CallbackRun {
    attempt: i32,
    pid: i32,
    started_at: DateTime<Utc>,
    pending: i64,
    done: i64,
    dead: i64,
    cancelled: i64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_ten_thousand_ends_once_while_a_worker_is_killed_again_and_again() {
    let (_serial, db) = alone_on_shared_server().await;
    let batch = Batch::new()
        .then(batch_ended::builder())
        .enqueue(
            &db.pool,
            (0..MEMBERS).map(|_| chaos_job::builder(MEMBER_MS)),
        )
        .await
        .expect("enqueue the batch");
    let ids: Vec<JobId> = batch.members.iter().map(|member| member.id()).collect();
    assert_eq!(ids.len(), MEMBERS);
    let callback = batch.callback.expect("the batch has a callback");

    let started = Instant::now();
    let settings = db.settings();
    let mut victim_settings = settings.clone();
    victim_settings.batch_callbacks = false;
    let steady = [
        Worker::spawn("steady-1", &settings),
        Worker::spawn("steady-2", &settings),
    ];
    let mut victim = Worker::spawn("victim-1", &victim_settings);
    let batch_ended_yet = || async {
        batch_outcome_by_id(&db.pool, batch.id)
            .await
            .expect("the batch's outcome")
            .ended_at
            .is_some()
    };
    // Kills, each with the victim's pid and the jobs running just after it.
    let mut kills: Vec<(u32, BTreeSet<JobId>)> = Vec::new();
    while !batch_ended_yet().await {
        assert!(
            kills.len() < MAX_KILLS,
            "the batch did not end after {MAX_KILLS} kills"
        );
        let pid = victim.pid();
        wait_until(
            &format!(
                "victim-{} to run {RUNS_BEFORE_KILL} members, or the batch to end",
                kills.len() + 1
            ),
            Duration::from_secs(30),
            &[&steady[0], &steady[1], &victim],
            || async { db.runs_by(pid).await >= RUNS_BEFORE_KILL || batch_ended_yet().await },
        )
        .await;
        if batch_ended_yet().await {
            break;
        }
        victim.kill();
        kills.push((pid, db.running_ids().await));
        victim = Worker::spawn(&format!("victim-{}", kills.len() + 1), &victim_settings);
    }
    let batch_end = started.elapsed();
    wait_until(
        "the batch's callback to be done",
        Duration::from_secs(20),
        &[&steady[0], &steady[1], &victim],
        || async { db.state_of(callback).await == "done" },
    )
    .await;
    let callback_done = started.elapsed();

    // Only now: a statement a victim sent just before it died may have been committed by the
    // server just after (such as the insert recording a run).
    let mut in_flight = BTreeSet::new();
    for (pid, running) in &kills {
        in_flight.extend(running.intersection(&db.run_by(*pid).await).copied());
    }
    let lost = db.lost(&ids).await;
    let rerun = db.run_more_than_once().await;
    let extra_runs: i64 = rerun.values().map(|runs| runs - 1).sum();
    let callback_runs: Vec<CallbackRun> = sqlx::query_as(
        "SELECT attempt, pid, started_at, pending, done, dead, cancelled
         FROM callbacks WHERE job_id = $1 ORDER BY started_at",
    )
    .bind(callback)
    .fetch_all(&db.pool)
    .await
    .expect("the callback's runs");
    let (last_member_end, members_done): (DateTime<Utc>, i64) = sqlx::query_as(
        "SELECT max(finished_at), count(*) FILTER (WHERE state = 'done')
         FROM jobs_queue WHERE batch_id = $1",
    )
    .bind(batch.id)
    .fetch_one(&db.pool)
    .await
    .expect("the members' ends");
    let outcome = batch_outcome_by_id(&db.pool, batch.id)
        .await
        .expect("the batch's outcome");
    let victim_pids: BTreeSet<i32> = kills
        .iter()
        .map(|(pid, _)| i32::try_from(*pid).unwrap())
        .chain([i32::try_from(victim.pid()).unwrap()])
        .collect();
    let callback_after_end = callback_runs
        .first()
        .map(|run| (run.started_at - last_member_end).num_milliseconds());

    Figures::new("SIGKILL, repeated, during a batch of 10,000 (3 workers, one killed, lease 2 s)")
        .add("members enqueued", MEMBERS)
        .add("members done", members_done)
        .add("lost", lost.len())
        .add("kills", kills.len())
        .add("members in flight at the kills", in_flight.len())
        .add(
            "members run more than once",
            format!("{} members, {extra_runs} extra runs", rerun.len()),
        )
        .add("rescued (lease expired)", db.rescued().await)
        .add("callback runs", callback_runs.len())
        .add(
            "last member's end -> callback's first run",
            callback_after_end.map_or_else(|| "never".into(), |ms| format!("{ms} ms")),
        )
        .add("time to drain (batch ended)", secs(batch_end))
        .add("time to the callback done", secs(callback_done))
        .print();

    assert!(lost.is_empty(), "lost members: {lost:?}");
    assert_eq!(members_done, i64::try_from(MEMBERS).unwrap());
    assert!(
        kills.len() >= 3,
        "only {} kills before the batch ended: the test proves little",
        kills.len()
    );
    let unexplained: Vec<&JobId> = rerun.keys().filter(|id| !in_flight.contains(id)).collect();
    assert!(
        unexplained.is_empty(),
        "members ran more than once without being in flight at a kill: {unexplained:?}"
    );
    assert_eq!(
        callback_runs.len(),
        1,
        "the callback ran exactly once: {callback_runs:?}"
    );
    let run = &callback_runs[0];
    assert_eq!(
        run.attempt, 1,
        "the callback's only run is its first attempt"
    );
    assert!(
        !victim_pids.contains(&run.pid),
        "the callback ran on a killed worker, which should not run it"
    );
    assert!(
        run.started_at >= last_member_end,
        "the callback ran at {}, before the last member ended at {last_member_end}",
        run.started_at
    );
    assert_eq!(
        (run.pending, run.done, run.dead, run.cancelled),
        (0, i64::try_from(MEMBERS).unwrap(), 0, 0),
        "what the callback read of its batch"
    );
    assert_eq!(outcome.ended_at.map(|at| at >= last_member_end), Some(true));
}
