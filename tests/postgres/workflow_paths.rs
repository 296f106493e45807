//! Every path that ends or re-opens a job moves its workflow on, in its own statement: a
//! worker's outcome, a completion in the job's own transaction, a rescue to dead or cancelled,
//! an operator's cancel by id and by filter, and a dead-letter replay each count the batch
//! member they move and release, cancel or re-open its dependents, and theirs in turn.

use std::time::Duration;

use jobs::admin::{self, CancelFilter, CancelNote, DeadFilter};
use jobs::postgres::__private::sql;
use jobs::postgres::__private::store::{self, Outcome};
use jobs::{AttemptError, Batch, Decision, JobId};

use crate::support::Db;
use crate::test_jobs::record_run;

/// Enqueues a `record_run` job after `prerequisite`; returns its id.
async fn dependent_of(db: &Db, prerequisite: JobId) -> JobId {
    record_run::builder(format!("after {prerequisite}"))
        .after([jobs::Dependency::on_job(prerequisite)])
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id()
}

/// Job `id`'s state and the prerequisite that cancelled it, if one did.
async fn state_of(db: &Db, id: JobId) -> (String, Option<JobId>) {
    sqlx::query_as("SELECT state, cancelled_by_prerequisite FROM jobs_queue WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// The batch's counts: (pending, done, dead, cancelled).
async fn counts(db: &Db, batch: i64) -> (u64, u64, u64, u64) {
    let outcome = jobs::postgres::batch::batch_outcome_by_id(&db.pool, batch)
        .await
        .unwrap();
    (
        outcome.pending,
        outcome.done,
        outcome.dead,
        outcome.cancelled,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_path_that_ends_or_reopens_a_member_moves_its_workflow_on() {
    let db = Db::new().await;
    // Eight members (the seventh in a queue of its own, for the cancel by filter), each with a
    // dependent; two dependents with a dependent of their own.
    let batch = Batch::new()
        .then(record_run::builder("callback".into()))
        .enqueue(
            &db.pool,
            (0..8).map(|n| {
                let member = record_run::builder(format!("member {n}"));
                if n == 6 {
                    member.queue("by-filter")
                } else {
                    member
                }
            }),
        )
        .await
        .unwrap();
    let members: Vec<JobId> = batch.members.iter().map(|member| member.id()).collect();
    let mut dependents = Vec::new();
    for member in &members {
        dependents.push(dependent_of(&db, *member).await);
    }
    let second_of_1 = dependent_of(&db, dependents[1]).await;
    let second_of_5 = dependent_of(&db, dependents[5]).await;

    // A worker's outcomes, two in one statement: member 0 done, member 1 dead. Member 2 is
    // completed in the job's own transaction.
    let claimed = store::claim(
        &db.pool,
        "default",
        &["record_run"],
        &[Duration::from_secs(60)],
        3,
        None,
    )
    .await
    .unwrap();
    let claimed_ids: Vec<JobId> = claimed.iter().map(|job| job.id).collect();
    assert_eq!(claimed_ids, members[..3]);
    let outcomes = [
        Outcome::of_run(
            members[0],
            claimed[0].lease_token,
            Decision::Complete { output: None },
        ),
        Outcome::of_run(
            members[1],
            claimed[1].lease_token,
            Decision::Dead {
                error: AttemptError {
                    kind: "permanent",
                    message: "bad input".into(),
                },
            },
        ),
    ];
    store::record_outcomes(&db.pool, &outcomes).await.unwrap();
    let completed: Option<JobId> = sqlx::query_scalar(sql::COMPLETE_IN_TRANSACTION)
        .bind(members[2])
        .bind(claimed[2].lease_token)
        .bind(None::<String>)
        .fetch_optional(&db.pool)
        .await
        .unwrap();
    assert_eq!(completed, Some(members[2]));

    // Rescues: member 3 out of attempts (dead), member 4 asked to stop (cancelled), one by the
    // rescue of expired leases, the other by the rescue of given jobs.
    db.abandon(members[3], 1_000).await;
    let rescued: Vec<(JobId, String, String, String)> = sqlx::query_as(sql::RESCUE_EXPIRED)
        .bind(10_i64)
        .bind(Vec::<JobId>::new())
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(rescued.len(), 1);
    assert_eq!((rescued[0].0, rescued[0].3.as_str()), (members[3], "dead"));
    db.abandon(members[4], 1).await;
    db.execute(&format!(
        "UPDATE jobs_queue SET cancel_requested_at = now() WHERE id = {}",
        members[4]
    ))
    .await;
    let rescued: Vec<(JobId, String, String, String)> = sqlx::query_as(sql::RESCUE_JOBS)
        .bind(vec![members[4]])
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(rescued.len(), 1);
    assert_eq!(rescued[0].3, "cancelled");

    // An operator's cancels: member 5 by id, member 6 by filter.
    let note = CancelNote::by("ops");
    let report = admin::cancel(&db.pool, &[members[5]], &note).await.unwrap();
    assert_eq!(report.cancelled.len(), 1, "{report:?}");
    let report = admin::cancel_matching(&db.pool, &CancelFilter::new().queue("by-filter"), &note)
        .await
        .unwrap();
    assert_eq!(report.cancelled.len(), 1, "{report:?}");

    // Member 7 is pending: the batch is open, its callback waiting.
    assert_eq!(counts(&db, batch.id).await, (1, 2, 2, 3));
    assert_eq!(db.job(batch.callback.unwrap()).await.state, "waiting");
    for (member, dependent) in members.iter().zip(&dependents) {
        let expected = match member {
            _ if *member == members[0] || *member == members[2] => ("ready".to_owned(), None),
            _ if *member == members[7] => ("waiting".to_owned(), None),
            _ => ("cancelled".to_owned(), Some(*member)),
        };
        assert_eq!(
            state_of(&db, *dependent).await,
            expected,
            "the dependent of member {member}"
        );
    }
    assert_eq!(
        state_of(&db, second_of_1).await,
        ("cancelled".to_owned(), Some(dependents[1])),
        "cancelled in turn"
    );
    assert_eq!(
        state_of(&db, second_of_5).await,
        ("cancelled".to_owned(), Some(dependents[5])),
        "cancelled in turn"
    );

    // A replay of the dead members re-opens them in the batch, and what they cancelled waits
    // again, and what that cancelled in turn.
    let report = admin::replay(&db.pool, &DeadFilter::all().ids([members[1], members[3]]))
        .await
        .unwrap();
    assert_eq!(report.replayed.len(), 2, "{report:?}");
    assert_eq!(counts(&db, batch.id).await, (3, 2, 0, 3));
    for waiting_again in [dependents[1], dependents[3], second_of_1] {
        assert_eq!(
            state_of(&db, waiting_again).await,
            ("waiting".to_owned(), None),
            "job {waiting_again} waits again"
        );
    }
    assert_eq!(state_of(&db, second_of_5).await.0, "cancelled");
}
