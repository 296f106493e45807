//! Writing outcomes through trouble: errors worth retrying are retried rather than dropped, and
//! the completer's queue is bounded, so that executors wait instead of memory growing.

use std::time::Duration;

use jobs::postgres::__private::sql;
use jobs::postgres::worker::Completion;
use jobs::{WorkerConfig, WorkerHandle};

use crate::plans::{done_outcomes, explain, leases_of, plan_nodes, plans_made};
use crate::support::{fast_config, start_worker, Db};
use crate::test_jobs::enqueue_record_run;

/// While `outage` holds a SQLSTATE, every write that takes a job out of `running` fails with
/// that SQLSTATE, as the database would answer during a failover (`25006`), under a lock
/// timeout (`55P03`) or after killing an idle transaction (`25P03`). Each refusal is counted in
/// the sequence `outage_hits`, which no rollback undoes.
async fn simulate_outcome_outage(db: &Db, sqlstate: &str) {
    for statement in [
        "CREATE TABLE outage (sqlstate text NOT NULL)",
        "CREATE SEQUENCE outage_hits",
        "CREATE FUNCTION refuse_outcomes() RETURNS trigger LANGUAGE plpgsql AS $$
         DECLARE
             code text;
         BEGIN
             SELECT sqlstate INTO code FROM outage LIMIT 1;
             IF code IS NOT NULL THEN
                 PERFORM nextval('outage_hits');
                 RAISE EXCEPTION 'simulated outage' USING ERRCODE = code;
             END IF;
             RETURN NEW;
         END $$",
        "CREATE TRIGGER refuse_outcomes BEFORE UPDATE ON jobs_queue FOR EACH ROW
         WHEN (OLD.state = 'running' AND NEW.state <> 'running')
         EXECUTE FUNCTION refuse_outcomes()",
    ] {
        db.execute(statement).await;
    }
    db.execute(&format!(
        "INSERT INTO outage (sqlstate) VALUES ('{sqlstate}')"
    ))
    .await;
}

/// Ends the outage [`simulate_outcome_outage`] began: outcomes are written again.
async fn end_outage(db: &Db) {
    db.execute("DELETE FROM outage").await;
}

/// Waits until at least `at_least` outcome writes were refused.
async fn wait_for_refusals(db: &Db, at_least: i64) {
    db.wait_for_count_at_least(
        &format!("{at_least} refused outcome writes"),
        "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM outage_hits",
        at_least,
    )
    .await;
}

/// Fast settings, with reconnections retried within 100 ms.
fn retrying_config() -> WorkerConfig {
    WorkerConfig {
        max_reconnect_delay: Duration::from_millis(100),
        ..fast_config()
    }
}

/// A job whose outcome write fails with `sqlstate` for a while is done once the trouble is
/// over, its attempt counted once: the outcome was retried, not dropped.
async fn an_outcome_write_failing_with(sqlstate: &str) {
    let db = Db::new().await;
    simulate_outcome_outage(&db, sqlstate).await;
    let id = enqueue_record_run(&db, sqlstate).await;
    let worker = start_worker(&db.pool, &["record_run"], retrying_config());
    wait_for_refusals(&db, 3).await;
    assert_eq!(db.job(id).await.state, "running");
    end_outage(&db).await;
    let job = db.wait_for_state(id, "done").await;
    worker.shutdown().await.expect("the worker stops");
    assert_eq!(job.attempts, 1, "the outcome of the first run was written");
    assert!(job.errors.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_refused_by_a_read_only_database_is_retried() {
    an_outcome_write_failing_with("25006").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_refused_by_a_lock_timeout_is_retried() {
    an_outcome_write_failing_with("55P03").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_refused_by_an_idle_transaction_timeout_is_retried() {
    an_outcome_write_failing_with("25P03").await;
}

/// A lock timeout as PostgreSQL raises it, not only as a trigger does: the outcome waits for a
/// row another transaction holds, times out, and is written once the row is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_write_that_times_out_on_a_lock_is_retried() {
    let db = Db::new().await;
    db.create_releases().await;
    db.execute(&format!(
        "ALTER DATABASE \"{}\" SET lock_timeout = '200ms'",
        db.name()
    ))
    .await;
    let worker_pool = db.other_pool(5).await;
    let lock_timeout: String = sqlx::query_scalar("SHOW lock_timeout")
        .fetch_one(&worker_pool)
        .await
        .unwrap();
    assert_eq!(lock_timeout, "200ms");
    let id = crate::test_jobs::waits_for_release::enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    let worker = start_worker(&worker_pool, &["waits_for_release"], retrying_config());
    db.wait_for_state(id, "running").await;
    let mut holder = db.pool.begin().await.unwrap();
    sqlx::query("SET LOCAL lock_timeout = 0")
        .execute(&mut *holder)
        .await
        .unwrap();
    sqlx::query("SELECT 1 FROM jobs_queue WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(&mut *holder)
        .await
        .unwrap();
    db.release(id).await;
    // The outcome's statement ran and failed (it cannot succeed while the row is locked): its
    // session is idle again with that statement as its last.
    db.wait_for_count_at_least(
        "an outcome write to time out on the lock",
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND state = 'idle'
           AND query LIKE '%WITH recorded AS%' AND query NOT LIKE '%pg_stat_activity%'",
        1,
    )
    .await;
    assert_eq!(db.job(id).await.state, "running");
    holder.commit().await.unwrap();
    let job = db.wait_for_state(id, "done").await;
    worker.shutdown().await.expect("the worker stops");
    assert_eq!(job.attempts, 1);
    assert!(job.errors.is_empty());
}

/// Six `record_run` jobs and a worker that runs two at a time, the database refusing their
/// outcomes (too many connections: an error of reach, retried for as long as the leases hold),
/// once four have run and three outcome writes were refused: one outcome being written, one
/// queued (the queue holds `max_batch`), and one waiting in each of the two slots; two jobs
/// stay ready. The worker claims no more than its free slots: claims ahead would take those two
/// as soon as the first two runs ended, before any executor waited (they would then wait for a
/// slot, unrun: see `read_ahead`). Returns the jobs' ids and the worker.
async fn full_outcome_queue(db: &Db) -> (Vec<i64>, WorkerHandle) {
    simulate_outcome_outage(db, "53300").await;
    let mut ids = Vec::new();
    for n in 0..6 {
        ids.push(enqueue_record_run(db, &format!("job {n}")).await);
    }
    let config = WorkerConfig {
        default_concurrency: 2,
        completion: Completion::Batched { max_batch: 1 },
        claim_ahead: 0,
        ..retrying_config()
    };
    let worker = start_worker(&db.pool, &["record_run"], config);
    db.wait_for_count(
        "four runs, two of them waiting on the full queue",
        "SELECT count(*) FROM runs",
        4,
    )
    .await;
    wait_for_refusals(db, 3).await;
    (ids, worker)
}

/// With the database unable to take outcomes, the completer's queue fills up and executors wait
/// for room holding their slots: the worker stops claiming instead of running jobs whose
/// outcomes pile up in memory. Nothing is lost once the database takes outcomes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_outcome_queue_holds_executors_back() {
    let db = Db::new().await;
    let (ids, worker) = full_outcome_queue(&db).await;
    wait_for_refusals(&db, 8).await;
    assert_eq!(db.count("SELECT count(*) FROM runs").await, 4);
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'ready' AND attempts = 0")
            .await,
        2,
        "no claim while the executors wait"
    );
    end_outage(&db).await;
    for id in &ids {
        let job = db.wait_for_state(*id, "done").await;
        assert_eq!(job.attempts, 1);
    }
    worker.shutdown().await.expect("the worker stops");
    assert_eq!(db.count("SELECT count(*) FROM runs").await, 6);
}

/// Fills the table with `count` running `record_run` jobs under leases of an hour, analyzed.
async fn running_jobs(db: &Db, count: i64) {
    sqlx::query(
        "INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts,
                                 lease_token, lease_expires_at, attempted_at)
         SELECT 'record_run', 'default', '{}'::jsonb, 'running', 1, 8,
                gen_random_uuid(), now() + interval '1 hour', now()
         FROM generate_series(1, $1)",
    )
    .bind(count)
    .execute(&db.pool)
    .await
    .unwrap();
    db.execute("ANALYZE jobs_queue").await;
}

/// The heartbeat and the outcomes lock their rows in the order of the ids bound (which the
/// worker sorts): the join drives from the arrays and looks each id up in the primary key, on a
/// table with many rows and a full batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_and_outcomes_lock_rows_in_the_order_bound() {
    let db = Db::new().await;
    running_jobs(&db, 100_000).await;
    let (ids, tokens) = leases_of(
        &db,
        "SELECT id, lease_token FROM jobs_queue ORDER BY id LIMIT 500",
    )
    .await;
    let count = ids.len();
    let heartbeat: serde_json::Value = sqlx::query_scalar(&explain(sql::HEARTBEAT))
        .bind(&ids)
        .bind(&tokens)
        .bind(vec![30.0_f64; count])
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let mut plans = vec![("heartbeat", heartbeat)];
    let text = explain(sql::RECORD_OUTCOMES);
    let outcomes: serde_json::Value = done_outcomes(&text, &ids, &tokens)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    plans.push(("outcomes", outcomes));
    for (name, plan) in plans {
        println!("{name}: {plan:#}");
        let nodes = plan_nodes(&plan);
        let join = nodes
            .iter()
            .find(|node| {
                node["Plans"].as_array().is_some_and(|children| {
                    children.iter().any(|child| {
                        child["Relation Name"] == "jobs_queue"
                            && child["Node Type"] != "ModifyTable"
                    })
                })
            })
            .unwrap_or_else(|| panic!("{name}: no join over jobs_queue"));
        let children = join["Plans"].as_array().unwrap();
        assert_eq!(join["Node Type"], "Nested Loop", "{name}: {join:#}");
        assert_eq!(
            children[0]["Node Type"], "Function Scan",
            "{name}: the arrays drive the join"
        );
        assert_eq!(
            (
                children[1]["Node Type"].as_str(),
                children[1]["Index Name"].as_str()
            ),
            (Some("Index Scan"), Some("jobs_queue_pkey")),
            "{name}: each id looked up in the primary key"
        );
    }
}

/// A stop at once does not wait for executors waiting on a full outcome queue: they write
/// nothing, and their jobs come back when their leases expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_at_once_frees_executors_waiting_on_a_full_outcome_queue() {
    let db = Db::new().await;
    let (_, worker) = full_outcome_queue(&db).await;
    // The outage lasts until `end_outage`: a stop that waited on the blocked executors would
    // never return, so a deadline far above any scheduling delay tells the two apart.
    tokio::time::timeout(Duration::from_secs(30), worker.stop_now())
        .await
        .expect("stop_now returns while executors wait on the full outcome queue")
        .expect("the worker stops");
    end_outage(&db).await;
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'running'")
            .await,
        4,
        "left to their leases"
    );
}

/// A graceful shutdown with executors waiting on a full outcome queue ends once the database
/// takes outcomes again, every outcome written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_waits_for_the_outcomes_of_a_full_queue() {
    let db = Db::new().await;
    let (_, worker) = full_outcome_queue(&db).await;
    let shutdown = tokio::spawn(worker.shutdown());
    wait_for_refusals(&db, 6).await;
    end_outage(&db).await;
    tokio::time::timeout(Duration::from_secs(20), shutdown)
        .await
        .expect("the shutdown ends")
        .unwrap()
        .expect("the worker stops");
    assert_eq!(db.count("SELECT count(*) FROM runs").await, 4);
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'done' AND attempts = 1")
            .await,
        4,
        "every outcome written"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'ready' AND attempts = 0")
            .await,
        2
    );
}

/// The outcome statement and the heartbeat are planned once per connection, not at every
/// execution: after the five executions PostgreSQL plans one-off to compare, it keeps the
/// generic plan, whatever the number of jobs in each call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_and_heartbeats_keep_one_plan_per_connection() {
    let db = Db::new().await;
    running_jobs(&db, 1_000).await;
    let (ids, tokens) = leases_of(&db, "SELECT id, lease_token FROM jobs_queue ORDER BY id").await;
    let mut conn = db.pool.acquire().await.unwrap();
    // Calls of 1, 100, 1, 100, ... jobs: a plan made for the length of the arrays would differ
    // from call to call.
    let mut start = 0;
    for call in 0..10 {
        let count = if call % 2 == 0 { 1 } else { 100 };
        let (ids, tokens) = (&ids[start..start + count], &tokens[start..start + count]);
        start += count;
        sqlx::query(sql::HEARTBEAT)
            .bind(ids)
            .bind(tokens)
            .bind(vec![30.0_f64; count])
            .execute(&mut *conn)
            .await
            .unwrap();
        let mut written: Vec<i64> = done_outcomes(sql::RECORD_OUTCOMES, ids, tokens)
            .fetch_all(&mut *conn)
            .await
            .unwrap();
        written.sort_unstable();
        assert_eq!(written, ids, "every outcome written");
    }
    for (name, statement) in [
        ("the heartbeat", sql::HEARTBEAT),
        ("the outcome statement", sql::RECORD_OUTCOMES),
    ] {
        let (generic, custom) = plans_made(&mut conn, statement).await;
        assert_eq!(
            (generic, custom),
            (5, 5),
            "{name}: planned one-off only for the first five executions"
        );
    }
}
