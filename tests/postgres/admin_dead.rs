//! Dead letters through the library: list and inspect with the whole history, replay (attempts
//! reset, history kept, queue notified, twice is harmless, dedupe keys respected), discard only
//! what matches.

use std::time::Duration;

use jobs::admin::{self, DeadFilter, JobState};
use sqlx::postgres::PgListener;

use jobs_testkit::RowState::{Dead, Done};
use jobs_testkit::{days, hours, JobRow};

use crate::support::Db;
use crate::test_jobs::bad_input;

/// Two failed attempts, as a job's history holds them.
const HISTORY: &str = r#"[
    {"attempt": 1, "at": "2030-01-01T00:00:00+00:00", "kind": "transient", "error": "connection refused"},
    {"attempt": 2, "at": "2030-01-01T00:01:00+00:00", "kind": "permanent", "error": "no such user"}
]"#;

/// Dead `kind` jobs in queue `default`.
fn dead_jobs(kind: &str) -> JobRow {
    JobRow::new(kind).state(Dead)
}

/// A `resize` job due in an hour, holding the active dedupe key `key`.
fn active_holder(key: &str) -> JobRow {
    JobRow::new("resize").due_in(hours(1)).dedupe(key, "active")
}

/// The ids of `jobs`.
fn ids(jobs: &[admin::JobRef]) -> Vec<i64> {
    jobs.iter().map(|job| job.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_job_is_listed_and_shown_with_its_whole_history() {
    let db = Db::new().await;
    let [dead, _] = db
        .insert_all([
            dead_jobs("send_email")
                .queue("email")
                .finished_ago(hours(2))
                .errors_json(HISTORY),
            JobRow::new("resize"),
        ])
        .await;

    let listed = admin::list_dead(&db.pool, &DeadFilter::all(), 0, 10)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    let job = &listed[0];
    assert_eq!(
        (job.id, job.kind.as_str(), job.error_count),
        (dead[0], "send_email", 2)
    );
    assert_eq!(job.last_error.as_ref().unwrap().error, "no such user");
    assert!(
        job.dead_for >= Duration::from_secs(7_200),
        "{:?}",
        job.dead_for
    );
    assert_eq!(
        admin::count_dead(&db.pool, &DeadFilter::all())
            .await
            .unwrap(),
        1
    );

    let details = admin::job_details(&db.pool, dead[0])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(details.state, JobState::Dead);
    assert_eq!(details.payload, serde_json::json!({"n": 1}));
    let history: Vec<(i64, &str)> = details
        .errors
        .iter()
        .map(|error| (error.attempt, error.kind.as_str()))
        .collect();
    assert_eq!(history, [(1, "transient"), (2, "permanent")]);
    assert!(details.finished_at.unwrap().ends_with('Z'));
    assert_eq!(admin::job_details(&db.pool, 0).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_makes_dead_jobs_ready_keeps_their_history_and_wakes_the_queue() {
    let db = Db::new().await;
    let dead = db
        .insert_rows(
            dead_jobs("resize")
                .queue("email")
                .count(2)
                .errors_json(HISTORY),
        )
        .await;
    let mut listener = PgListener::connect_with(&db.pool).await.unwrap();
    listener.listen("jobs_queue").await.unwrap();

    let report = admin::replay(&db.pool, &DeadFilter::all()).await.unwrap();
    assert_eq!(ids(&report.replayed), dead);
    assert!(report.skipped.is_empty());
    let notification = tokio::time::timeout(Duration::from_secs(10), listener.recv())
        .await
        .expect("a notification")
        .unwrap();
    assert_eq!(notification.payload(), "email");

    let job = db.job(dead[0]).await;
    assert_eq!((job.state.as_str(), job.attempts), ("ready", 0));
    assert_eq!(job.errors.len(), 2, "the history is kept");
    assert!(job.ready_in_secs <= 0.0, "due at once");
    let finished: Option<f64> = db
        .job_value(dead[0], "extract(epoch FROM finished_at)::float8")
        .await;
    assert_eq!(finished, None);

    // Twice in a row: nothing left to do, nothing touched.
    let again = admin::replay(&db.pool, &DeadFilter::all().ids(dead.clone()))
        .await
        .unwrap();
    assert!(again.replayed.is_empty() && again.skipped.is_empty());
    assert_eq!(again.not_dead(&DeadFilter::all().ids(dead.clone())), dead);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_job_runs_again_from_its_first_attempt() {
    let db = Db::new().await;
    let id = bad_input::enqueue(&db.pool, "nobody".into())
        .await
        .unwrap()
        .id();
    let worker = db.start_worker(&["bad_input"]);
    db.wait_for_state(id, "dead").await;

    let report = admin::replay(&db.pool, &DeadFilter::all().kind("bad_input"))
        .await
        .unwrap();
    assert_eq!(ids(&report.replayed), [id]);
    // It fails permanently again: dead once more, one attempt used, both errors kept.
    db.wait_for_count(
        "the replayed job to fail again",
        &format!(
            "SELECT count(*) FROM jobs_queue
             WHERE id = {id} AND state = 'dead' AND jsonb_array_length(errors) = 2"
        ),
        1,
    )
    .await;
    worker.shutdown().await.expect("the worker stops");
    let job = db.job(id).await;
    assert_eq!(job.attempts, 1);
    let attempts: Vec<i32> = job.errors.iter().map(|error| error.attempt).collect();
    assert_eq!(attempts, [1, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_selects_by_id_kind_queue_and_age() {
    let db = Db::new().await;
    let [email, old, recent, other_queue] = db
        .insert_all([
            dead_jobs("send_email").queue("email").count(2),
            dead_jobs("resize").finished_ago(days(10)),
            dead_jobs("resize").count(2),
            dead_jobs("resize").queue("bulk"),
        ])
        .await;

    let by_id = admin::replay(&db.pool, &DeadFilter::all().ids([email[1]]))
        .await
        .unwrap();
    assert_eq!(ids(&by_id.replayed), [email[1]]);
    let by_kind = admin::replay(&db.pool, &DeadFilter::all().kind("send_email"))
        .await
        .unwrap();
    assert_eq!(ids(&by_kind.replayed), [email[0]]);
    let by_age = admin::replay(
        &db.pool,
        &DeadFilter::all()
            .queue("default")
            .dead_for_at_least(Duration::from_secs(7 * 86_400)),
    )
    .await
    .unwrap();
    assert_eq!(ids(&by_age.replayed), old);

    // In batches of one, by id: the cursor walks the whole selection.
    let mut replayed = Vec::new();
    let mut after = 0;
    loop {
        let batch = admin::replay_batch(&db.pool, &DeadFilter::all(), after, 1)
            .await
            .unwrap();
        replayed.extend(ids(&batch.report.replayed));
        match batch.resume_after {
            Some(next) => after = next,
            None => break,
        }
    }
    let mut expected = [recent, other_queue].concat();
    expected.sort_unstable();
    assert_eq!(replayed, expected);
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'dead'")
            .await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_skips_a_job_whose_active_dedupe_key_another_job_holds() {
    let db = Db::new().await;
    // Two dead jobs with the same key (twins): the first comes back, the second would collide
    // with it. A retained key is held by the dead row itself: replaying it breaks nothing.
    let [held, holder, first_twin, second_twin, retained] = db
        .insert_all([
            dead_jobs("resize").dedupe("sync:1", "active"),
            active_holder("sync:1"),
            dead_jobs("resize").dedupe("sync:2", "active"),
            dead_jobs("resize").dedupe("sync:2", "active"),
            dead_jobs("resize").dedupe("receipt:1", "retained"),
        ])
        .await;
    let twins = [first_twin[0], second_twin[0]];

    let report = admin::replay(&db.pool, &DeadFilter::all()).await.unwrap();
    assert_eq!(ids(&report.replayed), [twins[0], retained[0]]);
    let skipped: Vec<(i64, &str, i64)> = report
        .skipped
        .iter()
        .map(|skip| (skip.job.id, skip.dedupe_key.as_str(), skip.held_by))
        .collect();
    assert_eq!(
        skipped,
        [
            (held[0], "sync:1", holder[0]),
            (twins[1], "sync:2", twins[0])
        ]
    );
    assert_eq!(db.job(held[0]).await.state, "dead");
    assert_eq!(db.job(twins[1]).await.state, "dead");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previews_foretell_replay_and_discard_and_change_nothing() {
    let db = Db::new().await;
    let holder = db.insert_rows(active_holder("sync:1")).await;
    for (key, scope) in [
        ("sync:1", "active"),
        ("sync:2", "active"),
        ("sync:2", "active"),
        ("receipt:1", "retained"),
    ] {
        db.insert_rows(dead_jobs("resize").dedupe(key, scope)).await;
    }
    db.insert_rows(dead_jobs("other")).await;
    let filter = DeadFilter::all().kind("resize");

    let discard = admin::preview_discard(&db.pool, &filter).await.unwrap();
    assert_eq!(discard.discarded.len(), 4);
    let preview = admin::preview_replay(&db.pool, &filter).await.unwrap();
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'dead'")
            .await,
        5,
        "a preview changed nothing"
    );
    assert_eq!(preview.skipped[0].held_by, holder[0]);

    // A replay one job per statement: the twin replayed first holds the key for the second, as
    // the preview said, though it was in another batch.
    let mut report = admin::ReplayReport::default();
    let mut after = 0;
    loop {
        let batch = admin::replay_batch(&db.pool, &filter, after, 1)
            .await
            .unwrap();
        report.merge(batch.report);
        match batch.resume_after {
            Some(next) => after = next,
            None => break,
        }
    }
    assert_eq!(preview, report);
    assert_eq!((report.replayed.len(), report.skipped.len()), (2, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discard_deletes_only_the_dead_jobs_that_match() {
    let db = Db::new().await;
    let [old, recent, other_kind, _, _] = db
        .insert_all([
            dead_jobs("resize").count(2).finished_ago(days(10)),
            dead_jobs("resize"),
            dead_jobs("send_email").finished_ago(days(10)),
            JobRow::new("resize").state(Done).finished_ago(days(10)),
            JobRow::new("resize"),
        ])
        .await;

    let filter = DeadFilter::all()
        .kind("resize")
        .dead_for_at_least(Duration::from_secs(7 * 86_400));
    let report = admin::discard(&db.pool, &filter).await.unwrap();
    assert_eq!(ids(&report.discarded), old);
    let again = admin::discard(&db.pool, &filter).await.unwrap();
    assert!(again.discarded.is_empty());

    let left: Vec<i64> = db
        .column("SELECT id FROM jobs_queue WHERE state = 'dead' ORDER BY id")
        .await;
    assert_eq!(left, [recent[0], other_kind[0]]);
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue").await, 4);
}
