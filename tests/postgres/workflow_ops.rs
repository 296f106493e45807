//! Operating workflows: waiting jobs counted, found and shown with their links; a workflow
//! listed; stuck workflows reported by `check`; retention keeping a workflow until it ends.

use std::time::Duration;

use jobs::admin::{
    self, HealthThresholds, JobFilter, JobState, JobStatus, PageRequest, Retention,
    RetentionConfig, Violation,
};
use jobs::{Batch, Dependency, JobId, OnFailure};

use crate::support::Db;
use crate::test_jobs::record_run;

/// Enqueues a `record_run` job labelled `label` after `after`; returns its id.
async fn after(db: &Db, label: &str, after: Vec<Dependency>) -> JobId {
    record_run::builder(label.to_owned())
        .after(after)
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id()
}

/// Ends job `id` in `state` as a worker or an operator would (its workflow moves on), that
/// many days ago.
async fn end(db: &Db, id: JobId, state: &str, days_ago: u32) {
    sqlx::query(
        "WITH ended AS (
             UPDATE jobs_queue SET state = $2, attempts = 1, lease_token = NULL,
                    lease_expires_at = NULL, finished_at = now() - make_interval(days => $3)
             WHERE id = $1
             RETURNING id, batch_id, has_dependents, state
         )
         SELECT jobs_workflow_steps(ARRAY[id], ARRAY[batch_id], ARRAY[has_dependents],
                                    ARRAY['running'], ARRAY[state])
         FROM ended",
    )
    .bind(id)
    .bind(state)
    .bind(i32::try_from(days_ago).unwrap())
    .execute(&db.pool)
    .await
    .unwrap();
}

/// Moves job `id`'s finish `days_ago` into the past, its state unchanged.
async fn age(db: &Db, id: JobId, days_ago: u32) {
    sqlx::query(
        "UPDATE jobs_queue SET finished_at = now() - make_interval(days => $2) WHERE id = $1",
    )
    .bind(id)
    .bind(i32::try_from(days_ago).unwrap())
    .execute(&db.pool)
    .await
    .unwrap();
}

async fn exists(db: &Db, id: JobId) -> bool {
    db.count(&format!("SELECT count(*) FROM jobs_queue WHERE id = {id}"))
        .await
        == 1
}

/// Runs retention (7 days) until it has nothing left to delete.
async fn prune(db: &Db) -> u64 {
    let retention = Retention::new(db.pool.clone(), RetentionConfig::default()).unwrap();
    let mut deleted = 0;
    loop {
        let report = retention.run_once().await.unwrap();
        deleted += report.deleted();
        if !report.more {
            return deleted;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_jobs_are_counted_found_and_shown_with_their_links() {
    let db = Db::new().await;
    let first = record_run::enqueue(&db.pool, "first".into())
        .await
        .unwrap()
        .id();
    let other = record_run::enqueue(&db.pool, "other".into())
        .await
        .unwrap()
        .id();
    let second = after(
        &db,
        "second",
        vec![
            Dependency::on_job(first),
            Dependency::on_job(other).run_on_failure(),
        ],
    )
    .await;
    let third = after(&db, "third", vec![Dependency::on_job(second)]).await;

    let stats = admin::stats(&db.pool).await.unwrap();
    assert_eq!(stats.total().waiting, 2);
    assert_eq!(stats.total().ready, 2);
    assert_eq!(stats.longest_waiting.len(), 2);
    let oldest = &stats.longest_waiting[0];
    assert_eq!(oldest.id, second);
    let blocking = oldest.waits_for.as_ref().unwrap();
    assert_eq!((blocking.id, blocking.state), (first, JobState::Ready));
    assert_eq!(
        stats.longest_waiting[1].waits_for.as_ref().unwrap().id,
        second
    );

    // Searchable by status: with a kind, without, and by id.
    for filter in [
        JobFilter::all().status(JobStatus::Waiting),
        JobFilter::all()
            .kind("record_run")
            .status(JobStatus::Waiting),
    ] {
        let page = admin::find_jobs(&db.pool, &filter, &PageRequest::default())
            .await
            .unwrap();
        let found: Vec<(JobId, JobStatus)> =
            page.jobs.iter().map(|job| (job.id, job.status)).collect();
        assert_eq!(
            found,
            [(third, JobStatus::Waiting), (second, JobStatus::Waiting)]
        );
    }
    let page = admin::find_jobs(
        &db.pool,
        &JobFilter::all().id(third),
        &PageRequest::default(),
    )
    .await
    .unwrap();
    assert_eq!(page.jobs[0].status, JobStatus::Waiting);
    let everything = admin::find_jobs(&db.pool, &JobFilter::all(), &PageRequest::default())
        .await
        .unwrap();
    assert_eq!(everything.jobs.len(), 4);

    let details = admin::job_details(&db.pool, second).await.unwrap().unwrap();
    assert_eq!(details.state, JobState::Waiting);
    let prerequisites: Vec<(JobId, Option<JobState>, OnFailure)> = details
        .prerequisites
        .iter()
        .map(|p| (p.id, p.state, p.on_failure))
        .collect();
    assert_eq!(
        prerequisites,
        [
            (first, Some(JobState::Ready), OnFailure::Cancel),
            (other, Some(JobState::Ready), OnFailure::Run)
        ]
    );
    assert_eq!(details.prerequisites[0].kind.as_deref(), Some("record_run"));
    let dependents: Vec<(JobId, JobState)> =
        details.dependents.iter().map(|d| (d.id, d.state)).collect();
    assert_eq!(dependents, [(third, JobState::Waiting)]);
    assert_eq!(details.dependent_count, 1);
    assert_eq!(details.batch_id, None);

    // A prerequisite failing cancels its dependents, naming it.
    end(&db, first, "dead", 0).await;
    let details = admin::job_details(&db.pool, second).await.unwrap().unwrap();
    assert_eq!(details.state, JobState::Cancelled);
    assert_eq!(details.cancelled_by_prerequisite, Some(first));
    let details = admin::job_details(&db.pool, third).await.unwrap().unwrap();
    assert_eq!(details.cancelled_by_prerequisite, Some(second));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_now_leaves_waiting_jobs_waiting() {
    let db = Db::new().await;
    let first = record_run::builder("first".into())
        .delay(Duration::from_secs(3_600))
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    let second = after(&db, "second", vec![Dependency::on_job(first)]).await;

    let report = admin::run_now(&db.pool, &[first, second]).await.unwrap();
    let made_due: Vec<JobId> = report.made_due.iter().map(|job| job.id).collect();
    assert_eq!(made_due, [first]);
    assert_eq!(report.not_waiting, [second]);
    assert_eq!(db.job(second).await.state, "waiting");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_lists_every_connected_job_with_its_edges() {
    let db = Db::new().await;
    // A diamond: top, then left and right, then bottom; and tail after bottom.
    let top = record_run::enqueue(&db.pool, "top".into())
        .await
        .unwrap()
        .id();
    let left = after(&db, "left", vec![Dependency::on_job(top)]).await;
    let right = after(&db, "right", vec![Dependency::on_job(top)]).await;
    let bottom = after(
        &db,
        "bottom",
        vec![Dependency::on_job(left), Dependency::on_job(right)],
    )
    .await;
    let tail = after(&db, "tail", vec![Dependency::on_job(bottom)]).await;
    let unrelated = record_run::enqueue(&db.pool, "unrelated".into())
        .await
        .unwrap()
        .id();

    // From any of them, the same five jobs.
    for start in [top, left, tail] {
        let workflow = admin::workflow(&db.pool, start, 1_000)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(workflow.job, start);
        assert!(!workflow.truncated);
        assert_eq!(workflow.batch, None);
        let edges: Vec<(JobId, Option<JobState>, Vec<JobId>)> = workflow
            .jobs
            .iter()
            .map(|job| (job.id, job.state, job.prerequisites.clone()))
            .collect();
        assert_eq!(
            edges,
            [
                (top, Some(JobState::Ready), vec![]),
                (left, Some(JobState::Waiting), vec![top]),
                (right, Some(JobState::Waiting), vec![top]),
                (bottom, Some(JobState::Waiting), vec![left, right]),
                (tail, Some(JobState::Waiting), vec![bottom]),
            ]
        );
    }
    let alone = admin::workflow(&db.pool, unrelated, 1_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(alone.jobs.len(), 1);

    // Bounded, saying so, and always holding the job asked about.
    let bounded = admin::workflow(&db.pool, tail, 2).await.unwrap().unwrap();
    assert!(bounded.truncated);
    assert_eq!(bounded.jobs.len(), 2);
    assert!(bounded.get(tail).is_some());

    assert_eq!(admin::workflow(&db.pool, 999_999, 10).await.unwrap(), None);
    assert!(admin::workflow(&db.pool, top, 0).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_members_workflow_holds_its_batch_and_callback() {
    let db = Db::new().await;
    let batch = Batch::new()
        .then(record_run::builder("callback".into()))
        .enqueue(
            &db.pool,
            (0..3).map(|n| record_run::builder(format!("member {n}"))),
        )
        .await
        .unwrap();
    let callback = batch.callback.unwrap();
    let notify = after(&db, "notify", vec![Dependency::on_job(callback)]).await;
    let member = match batch.members[0] {
        jobs::Enqueued::New(id) => id,
        ref other => panic!("{other:?}"),
    };
    end(&db, member, "done", 0).await;

    for start in [member, callback] {
        let workflow = admin::workflow(&db.pool, start, 100)
            .await
            .unwrap()
            .unwrap();
        let outcome = workflow.batch.as_ref().unwrap();
        assert_eq!(outcome.id, batch.id);
        assert_eq!((outcome.pending, outcome.done), (2, 1));
        assert_eq!(
            workflow.get(callback).unwrap().state,
            Some(JobState::Waiting)
        );
        assert_eq!(workflow.get(notify).unwrap().prerequisites, vec![callback]);
    }
    let details = admin::job_details(&db.pool, member).await.unwrap().unwrap();
    assert_eq!(details.batch_id, Some(batch.id));
    let details = admin::job_details(&db.pool, callback)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(details.callback_of, Some(batch.id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_names_the_prerequisite_a_stuck_job_waits_for_and_open_batches() {
    let db = Db::new().await;
    let charge = record_run::enqueue(&db.pool, "charge".into())
        .await
        .unwrap()
        .id();
    let receipt = after(&db, "receipt", vec![Dependency::on_job(charge)]).await;
    let batch = Batch::new()
        .then(record_run::builder("album".into()))
        .enqueue(
            &db.pool,
            (0..2).map(|n| record_run::builder(format!("resize {n}"))),
        )
        .await
        .unwrap();
    // The prerequisite keeps failing.
    db.execute(&format!(
        "UPDATE jobs_queue SET attempts = 3, errors = '[{{\"attempt\": 3, \"at\": \"2026-01-01T00:00:00Z\", \"kind\": \"transient\", \"error\": \"card declined\"}}]'
         WHERE id = {charge}"
    ))
    .await;

    let quiet = HealthThresholds {
        max_ready_age: Duration::from_secs(86_400),
        max_unserved_age: Duration::from_secs(86_400),
        ..HealthThresholds::default()
    };
    let stats = admin::stats(&db.pool).await.unwrap();
    assert_eq!(admin::check(&stats, &quiet), []);

    db.execute(&format!(
        "UPDATE jobs_queue SET created_at = now() - interval '2 hours' WHERE id = {receipt};
         UPDATE jobs_batches SET created_at = now() - interval '2 hours' WHERE id = {}",
        batch.id
    ))
    .await;
    let stats = admin::stats(&db.pool).await.unwrap();
    let violations = admin::check(&stats, &quiet);
    let names: Vec<&str> = violations.iter().map(Violation::name).collect();
    assert_eq!(names, ["workflow_stuck", "batch_open"], "{violations:?}");
    match &violations[0] {
        Violation::WorkflowStuck { job, waits_for, .. } => {
            assert_eq!(*job, receipt);
            let blocking = waits_for.as_ref().unwrap();
            assert_eq!((blocking.id, blocking.attempts), (charge, 3));
            assert_eq!(blocking.last_error.as_ref().unwrap().error, "card declined");
        }
        other => panic!("{other:?}"),
    }
    let line = violations[0].to_string();
    assert!(line.contains(&format!("job {receipt}")), "{line}");
    assert!(line.contains(&format!("for job {charge}")), "{line}");
    assert!(line.contains("card declined"), "{line}");
    let line = violations[1].to_string();
    assert!(
        line.contains(&format!("batch {} has been open", batch.id))
            && line.contains("2 members pending"),
        "{line}"
    );

    // The callback is not reported while its batch is young; a longer threshold reports none.
    let patient = HealthThresholds {
        max_waiting_age: Duration::from_secs(3 * 3_600),
        ..quiet
    };
    assert_eq!(admin::check(&stats, &patient), []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_keeps_a_prerequisite_until_its_dependents_have_ended() {
    let db = Db::new().await;
    let first = record_run::enqueue(&db.pool, "first".into())
        .await
        .unwrap()
        .id();
    let second = after(&db, "second", vec![Dependency::on_job(first)]).await;
    let plain = record_run::enqueue(&db.pool, "plain".into())
        .await
        .unwrap()
        .id();
    end(&db, first, "done", 8).await;
    end(&db, plain, "done", 8).await;
    assert_eq!(db.job(second).await.state, "ready");

    // The dependent has not ended: its prerequisite stays, a plain job of the same age goes.
    assert_eq!(prune(&db).await, 1);
    assert!(exists(&db, first).await && !exists(&db, plain).await);
    let preview = Retention::new(db.pool.clone(), RetentionConfig::default())
        .unwrap()
        .preview()
        .await
        .unwrap();
    assert_eq!(preview.deleted(), 0);

    // Ended recently: the prerequisite goes, the dependent (young) and its dependency row stay.
    end(&db, second, "done", 0).await;
    assert_eq!(prune(&db).await, 1);
    assert!(!exists(&db, first).await && exists(&db, second).await);
    assert_eq!(db.count("SELECT count(*) FROM jobs_dependencies").await, 1);
    let details = admin::job_details(&db.pool, second).await.unwrap().unwrap();
    assert_eq!(details.prerequisites[0].id, first);
    assert_eq!(details.prerequisites[0].state, None);

    // Old: the dependent goes, its dependency row with it.
    age(&db, second, 8).await;
    assert_eq!(prune(&db).await, 1);
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue").await, 0);
    assert_eq!(db.count("SELECT count(*) FROM jobs_dependencies").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_keeps_a_batch_until_it_and_its_callback_have_ended() {
    let db = Db::new().await;
    let batch = Batch::new()
        .then(record_run::builder("callback".into()))
        .enqueue(
            &db.pool,
            (0..2).map(|n| record_run::builder(format!("member {n}"))),
        )
        .await
        .unwrap();
    let callback = batch.callback.unwrap();
    let members: Vec<JobId> = batch
        .members
        .iter()
        .map(|member| match member {
            jobs::Enqueued::New(id) => *id,
            other => panic!("{other:?}"),
        })
        .collect();
    let batch_rows = || async {
        db.count(&format!(
            "SELECT (SELECT count(*) FROM jobs_batches WHERE id = {0})
                  + (SELECT count(*) FROM jobs_batch_chunks WHERE batch_id = {0})",
            batch.id
        ))
        .await
    };

    // A member ended long ago, the other pending: the batch has not ended.
    end(&db, members[0], "done", 8).await;
    assert_eq!(prune(&db).await, 0);

    // Every member ended: the callback is ready, not ended.
    end(&db, members[1], "cancelled", 8).await;
    assert_eq!(db.job(callback).await.state, "ready");
    assert_eq!(prune(&db).await, 0);

    // The callback ended: the members go; the batch rows stay while the callback does.
    end(&db, callback, "done", 0).await;
    assert_eq!(prune(&db).await, 2);
    assert!(exists(&db, callback).await);
    assert!(batch_rows().await > 0);

    // The callback goes; the batch rows once the batch ended long enough ago.
    age(&db, callback, 8).await;
    db.execute(&format!(
        "UPDATE jobs_batches SET ended_at = now() - interval '8 days' WHERE id = {}",
        batch.id
    ))
    .await;
    let retention = Retention::new(db.pool.clone(), RetentionConfig::default()).unwrap();
    let report = retention.run_once().await.unwrap();
    assert_eq!((report.deleted(), report.batches), (1, 1));
    assert_eq!(batch_rows().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_never_deletes_a_job_a_dependent_is_being_enqueued_after() {
    let db = Db::new().await;
    let charge = record_run::enqueue(&db.pool, "charge".into())
        .await
        .unwrap()
        .id();
    end(&db, charge, "done", 8).await;

    // A refund enqueued after the old charge, in a transaction still open while retention runs:
    // retention neither waits for it nor deletes the charge under it.
    let mut tx = db.pool.begin().await.unwrap();
    let refund = record_run::builder("refund".into())
        .after([Dependency::on_job(charge)])
        .enqueue_in(&mut tx)
        .await
        .unwrap()
        .id();
    let retention = Retention::new(db.pool.clone(), RetentionConfig::default()).unwrap();
    let report = tokio::time::timeout(Duration::from_secs(10), retention.run_once())
        .await
        .expect("retention does not wait for the enqueue")
        .unwrap();
    assert_eq!(report.deleted(), 0);
    tx.commit().await.unwrap();

    assert_eq!(db.job(refund).await.state, "ready");
    assert_eq!(prune(&db).await, 0);
    assert!(exists(&db, charge).await);
}
