//! `jobs prune`: old done and cancelled jobs go; dead and recent ones stay.

use crate::fixtures::{backdate, jobs_per_state, RunOutput};
use crate::support::Db;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_deletes_old_finished_jobs_only() {
    let db = Db::migrated().await;
    let mut finished_long_ago = db.insert(3, "resize", "default", "done").await;
    finished_long_ago.extend(db.insert(1, "resize", "default", "cancelled").await);
    finished_long_ago.extend(db.insert(1, "resize", "default", "dead").await);
    backdate(&db, &finished_long_ago, &["finished_at"], "8 days").await;
    db.insert(2, "resize", "default", "done").await;
    db.insert(1, "resize", "default", "ready").await;

    db.jobs(&["prune"])
        .await
        .prints("deleted 4 jobs finished more than 7d ago (3 done, 1 cancelled)\n");
    assert_eq!(
        jobs_per_state(&db).await,
        [
            ("dead".to_string(), 1),
            ("done".to_string(), 2),
            ("ready".to_string(), 1)
        ]
    );

    db.jobs(&["prune"])
        .await
        .prints("nothing deleted: no done or cancelled job finished more than 7d ago\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_takes_an_age_and_a_batch_size() {
    let db = Db::migrated().await;
    let done = db.insert(5, "resize", "default", "done").await;
    backdate(&db, &done, &["finished_at"], "2 hours").await;
    db.jobs(&["prune", "--older-than", "1h", "--batch-size", "2"])
        .await
        .prints("deleted 5 jobs finished more than 1h ago (5 done, 0 cancelled)\n");
    let line = db
        .jobs(&["prune", "--batch-size", "0"])
        .await
        .one_line_error();
    assert!(line.contains("--batch-size"), "{line}");
}
