//! `jobs dead list|show|replay|discard`, with a real worker running the jobs.

use std::time::Duration;

use jobs::{job, JobError, JobResult, State, Worker, WorkerConfig, WorkerHandle};
use sqlx::PgPool;

use crate::fixtures::{assert_check_passes, backdate, json_of, share_active_dedupe_key, RunOutput};
use crate::support::{wait_until, Db};

/// Fails permanently until the test sets the flag (a row in `flags`), then succeeds.
#[job(max_attempts = 1)]
async fn needs_flag(pool: State<PgPool>, n: i64) -> JobResult {
    let set: bool = sqlx::query_scalar("SELECT EXISTS (SELECT FROM flags)")
        .fetch_one(&*pool)
        .await?;
    if !set {
        return Err(JobError::permanent(format!("job {n}: the flag is not set")));
    }
    Ok(())
}

fn start_worker(pool: &PgPool) -> WorkerHandle {
    Worker::builder(pool.clone())
        .kinds(["needs_flag"])
        .state(pool.clone())
        .config(WorkerConfig {
            poll_interval: Duration::from_millis(50),
            ..WorkerConfig::default()
        })
        .build()
        .expect("worker builds")
        .start()
}

async fn wait_for(db: &Db, what: &str, query: &'static str, expected: i64) {
    wait_until(what, || {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(query)
                .fetch_one(&pool)
                .await
                .unwrap()
                == expected
        }
    })
    .await;
}

/// The attempts counted for job `id`, and the errors its history keeps.
async fn attempts_and_errors(db: &Db, id: i64) -> (i32, i32) {
    sqlx::query_as("SELECT attempts, jsonb_array_length(errors) FROM jobs_queue WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap_or_else(|error| panic!("job {id}: {error}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_turns_dead_jobs_into_done_ones_once_the_cause_is_fixed() {
    let db = Db::migrated().await;
    db.execute("CREATE TABLE flags (name text)").await;
    let first = needs_flag::enqueue(&db.pool, 1).await.unwrap().id();
    let second = needs_flag::enqueue(&db.pool, 2).await.unwrap().id();
    let worker = start_worker(&db.pool);
    wait_for(
        &db,
        "both jobs to die",
        "SELECT count(*) FROM jobs_queue WHERE state = 'dead'",
        2,
    )
    .await;

    let check = db.jobs(&["check"]).await.failed_check();
    assert_eq!(
        check.stdout,
        "dead: 2 dead jobs of kind needs_flag in queue default (at most 0 allowed)\n"
    );

    let list = db.jobs(&["dead", "list"]).await.success();
    let lines = list.lines();
    assert_eq!(lines.len(), 4, "{list:?}");
    assert!(lines[0].starts_with("ID"), "{list:?}");
    assert!(
        lines[1].contains(&format!("{first}  needs_flag  default")),
        "{list:?}"
    );
    assert!(
        lines[1].ends_with("permanent: job 1: the flag is not set"),
        "{list:?}"
    );
    assert_eq!(lines[3], "2 dead jobs");

    let show = db
        .jobs(&["dead", "show", &second.to_string()])
        .await
        .success();
    assert!(
        show.stdout.starts_with(&format!(
            "job {second}: kind needs_flag in queue default, dead\n"
        )),
        "{show:?}"
    );
    assert!(show.stdout.contains("  attempts     1 of 1\n"), "{show:?}");
    assert!(
        show.stdout.contains("  payload      {\"n\":2}\n"),
        "{show:?}"
    );
    assert!(show.stdout.contains("errors (1):\n  #1 "), "{show:?}");
    assert!(
        show.stdout
            .contains(" permanent: job 2: the flag is not set\n"),
        "{show:?}"
    );

    // The cause is fixed: replay, and the worker finishes them.
    db.execute("INSERT INTO flags VALUES ('set')").await;
    db.jobs(&["dead", "replay", "--kind", "needs_flag", "--yes"])
        .await
        .prints("replayed 2 dead jobs: needs_flag (queue default) 2\n");
    wait_for(
        &db,
        "both replayed jobs to be done",
        "SELECT count(*) FROM jobs_queue WHERE state = 'done'",
        2,
    )
    .await;
    assert_eq!(
        attempts_and_errors(&db, first).await,
        (1, 1),
        "one new attempt, the old error kept"
    );

    // Again: nothing is dead, nothing happens.
    db.jobs(&["dead", "replay", "--id", &first.to_string()])
        .await
        .prints(&format!(
            "no dead jobs replayed\njob {first} is not dead: nothing to replay\n"
        ));
    assert_check_passes(&db, &[]).await;
    worker.shutdown().await.expect("the worker stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_reports_a_job_left_dead_because_its_key_is_held() {
    let db = Db::migrated().await;
    let dead = db.insert(1, "sync_user", "sync", "dead").await;
    let holder = db.insert(1, "sync_user", "sync", "ready").await;
    share_active_dedupe_key(&db, &[dead[0], holder[0]], "sync:1").await;
    let (dead, holder) = (dead[0], holder[0]);
    db.jobs(&["dead", "replay", "--all", "--yes"])
        .await
        .prints(&format!(
            "no dead jobs replayed\nskipped job {dead} (kind sync_user, queue sync): job {holder} \
             holds its dedupe key \"sync:1\"; replay it once that job has finished\n"
        ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_narrows_by_kind_queue_and_age_and_says_when_it_is_cut() {
    let db = Db::migrated().await;
    db.insert(3, "send_email", "email", "dead").await;
    let old = db.insert(1, "resize", "default", "dead").await;
    backdate(&db, &old, &["finished_at"], "3 days").await;

    let by_age = db
        .jobs(&["dead", "list", "--older-than", "1d"])
        .await
        .success();
    assert_eq!(by_age.stdout.lines().count(), 3, "{by_age:?}");
    assert!(by_age.stdout.contains("resize"), "{by_age:?}");
    assert!(by_age.stdout.contains("3d"), "{by_age:?}");

    let cut = db
        .jobs(&["dead", "list", "--queue", "email", "--limit", "2"])
        .await
        .success();
    assert!(
        cut.stdout.ends_with(
            "showing 2 of 3 dead jobs: narrow with --kind, --queue or --older-than, or raise --limit\n"
        ),
        "{cut:?}"
    );

    let listed = json_of(&db, &["dead", "list", "--kind", "send_email", "--json"]).await;
    assert_eq!(listed["total"], 3);
    assert_eq!(listed["jobs"][0]["last_error"]["error"], "no such user");

    db.jobs(&["dead", "list", "--kind", "nothing"])
        .await
        .prints("no dead jobs\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discard_removes_only_what_matches() {
    let db = Db::migrated().await;
    let old = db.insert(2, "resize", "default", "dead").await;
    let recent = db.insert(1, "resize", "default", "dead").await;
    let other = db.insert(1, "send_email", "email", "dead").await;
    backdate(
        &db,
        &[old[0], old[1], other[0]],
        &["finished_at"],
        "10 days",
    )
    .await;
    let done = db.insert(1, "resize", "default", "done").await;

    db.jobs(&[
        "dead",
        "discard",
        "--kind",
        "resize",
        "--older-than",
        "7d",
        "--yes",
    ])
    .await
    .prints("discarded 2 dead jobs: resize (queue default) 2\n");
    let left: Vec<i64> = sqlx::query_scalar("SELECT id FROM jobs_queue ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, [recent[0], other[0], done[0]]);
    assert!(!left.contains(&old[0]));

    let (other, done) = (other[0].to_string(), done[0].to_string());
    db.jobs(&["dead", "discard", "--id", &other, "--id", &done])
        .await
        .prints(&format!(
            "discarded 1 dead job: send_email (queue email) 1\n\
             job {done} is not dead: nothing to discard\n"
        ));
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue").await, 2);
}
