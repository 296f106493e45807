//! Injects: SIGKILL, four times, on one of two worker processes draining 1,000 jobs that each
//! insert one row and complete in the same transaction (restarted each time). Proves: exactly
//! 1,000 rows at the end, one per job: no duplicates although some jobs ran twice, and no gaps.

use std::time::{Duration, Instant};

use jobs::JobId;
use jobs_chaos::effect_once;

use crate::support::{alone_on_shared_server, ids_of, kill_victims, secs, Figures};

const JOBS: usize = 1_000;
const KILLS: usize = 4;
/// Runs the victim does after each start before it is killed, so that it dies mid-work.
const RUNS_BEFORE_KILL: i64 = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_transactional_completion_leaves_exactly_one_effect_per_job() {
    let (_serial, db) = alone_on_shared_server().await;
    let ids = ids_of(
        effect_once::enqueue_many(
            &db.pool,
            (0..JOBS).map(|_| effect_once::Args { sleep_ms: 20 }),
        )
        .await,
    );
    let started = Instant::now();
    let (steady, victim, kills) = kill_victims(&db, KILLS, RUNS_BEFORE_KILL).await;
    let in_flight_at_kills: Vec<usize> = kills.iter().map(|kill| kill.running.len()).collect();
    db.wait_all_done(&ids, Duration::from_secs(60), &[&steady, &victim])
        .await;
    let drained = started.elapsed();

    let effects = db.scalar_i64("SELECT count(*) FROM effects").await;
    let distinct = db
        .scalar_i64("SELECT count(DISTINCT job_id) FROM effects")
        .await;
    let without_effect: Vec<JobId> = sqlx::query_scalar(
        "SELECT id FROM unnest($1::bigint[]) AS id
         WHERE NOT EXISTS (SELECT 1 FROM effects e WHERE e.job_id = id) ORDER BY id",
    )
    .bind(&ids)
    .fetch_all(&db.pool)
    .await
    .expect("jobs without an effect");
    let rerun = db.run_more_than_once().await;
    Figures::new("SIGKILL x4 during a drain of 1,000 jobs completing in their own transaction")
        .add("jobs enqueued", JOBS)
        .add("completed", db.count_in("done").await)
        .add("lost", db.lost(&ids).await.len())
        .add(
            "running at the kills",
            in_flight_at_kills
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(" + "),
        )
        .add("jobs run more than once", rerun.len())
        .add("effect rows", effects)
        .add("jobs with an effect", distinct)
        .add("drain time", secs(drained))
        .print();

    assert!(
        !rerun.is_empty(),
        "no job ran twice: the kills did not hit a job mid-transaction, so this proves nothing"
    );
    assert_eq!(
        effects,
        i64::try_from(JOBS).unwrap(),
        "one effect row per job"
    );
    assert_eq!(distinct, effects, "no job has two effect rows");
    assert!(
        without_effect.is_empty(),
        "jobs without an effect: {without_effect:?}"
    );
}
