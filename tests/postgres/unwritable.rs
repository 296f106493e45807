//! Outcomes the database cannot take: they must not hold back the others, nor the shutdown.

use std::time::Duration;

use jobs::{job, JobError, JobResult};

use crate::support::{leased_config, start_worker, Db};
use crate::test_jobs::enqueue_record_run;

/// Fails permanently with a message PostgreSQL's `text` cannot hold as is.
#[job(max_attempts = 1)]
pub async fn nul_in_error() -> JobResult {
    Err(JobError::permanent("bad\0byte"))
}

/// Fails permanently; the test's trigger makes the database refuse that outcome.
#[job(max_attempts = 1)]
pub async fn refused_verdict() -> JobResult {
    Err(JobError::permanent("the database will refuse this"))
}

/// Snoozes for longer than PostgreSQL's timestamps reach.
#[job(max_attempts = 1)]
pub async fn snoozes_forever() -> JobResult {
    Err(JobError::snooze(Duration::MAX))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_outcome_holds_back_neither_the_others_nor_shutdown() {
    let db = Db::new().await;
    // The database refuses to record refused_verdict's permanent failure (but not its rescue).
    sqlx::raw_sql(
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'refused by a test trigger'; END $$;
         CREATE TRIGGER refuse BEFORE UPDATE ON jobs_queue FOR EACH ROW
         WHEN (OLD.kind = 'refused_verdict' AND NEW.state = 'dead'
               AND NEW.errors -> -1 ->> 'kind' = 'permanent')
         EXECUTE FUNCTION refuse();",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let refused = refused_verdict::enqueue(&db.pool).await.unwrap().id();
    let nul = nul_in_error::enqueue(&db.pool).await.unwrap().id();
    let forever = snoozes_forever::enqueue(&db.pool).await.unwrap().id();
    let mut others = Vec::new();
    for n in 0..20 {
        others.push(enqueue_record_run(&db, &format!("other {n}")).await);
    }
    let config = leased_config(Duration::from_millis(800), Duration::from_millis(200));
    let worker = start_worker(
        &db.pool,
        &[
            "refused_verdict",
            "nul_in_error",
            "snoozes_forever",
            "record_run",
        ],
        config,
    );
    for id in &others {
        db.wait_for_state(*id, "done").await;
    }
    let nul = db.wait_for_state(nul, "dead").await;
    assert_eq!(nul.errors[0].error, "bad\\0byte");
    let forever = db.wait_for_state(forever, "ready").await;
    assert_eq!(forever.attempts, 0);
    assert!(forever.ready_in_secs > 99.0 * 365.0 * 24.0 * 3600.0);
    // Refused, the outcome is dropped; the lease expires and the rescue ends the job.
    let refused = db.wait_for_state(refused, "dead").await;
    assert_eq!(refused.errors.len(), 1);
    assert_eq!(refused.errors[0].kind, "lease_expired");
    tokio::time::timeout(Duration::from_secs(10), worker.shutdown())
        .await
        .expect("shutdown is not held by an unwritable outcome")
        .expect("the worker stops");
}
