//! Finding jobs through the library: every filter alone and together, keyset pages that list
//! each match once while jobs arrive, pages whose examination is bounded, refusals before the
//! database, and the plans of every search shape on a million retained rows.

use std::collections::BTreeSet;

use chrono::{Duration as Span, Utc};
use jobs::admin::{
    self, AdminError, Cursor, JobFilter, JobPage, JobStatus, PageRequest, MAX_PAGE_SIZE,
};
use jobs::postgres::__private::sql;
use jobs::JobId;
use serde_json::Value;
use sqlx::PgPool;

use jobs_testkit::RowState::{Cancelled, Dead, Done, Running, Waiting};
use jobs_testkit::{hours, minutes, JobRow};

use crate::plans::{
    assert_no_seq_scan, explain_analyze, indexes_read, plan_nodes, plan_of, scans_of,
};
use crate::support::Db;

/// A failed attempt whose message is `error`.
fn failed(error: &str) -> Value {
    serde_json::json!([{
        "attempt": 1, "at": "2030-01-01T00:00:00+00:00", "kind": "transient", "error": error
    }])
}

/// Every job `filter` selects, walking pages of `limit`; asserts that pages come newest first
/// and that no job is listed twice.
async fn every_page(pool: &PgPool, filter: &JobFilter, limit: usize) -> Vec<JobId> {
    let mut found = Vec::new();
    let mut page = PageRequest::first(limit);
    loop {
        let JobPage { jobs, next, .. } = admin::find_jobs(pool, filter, &page).await.unwrap();
        assert!(jobs.len() <= limit);
        found.extend(jobs.iter().map(|job| job.id));
        match next {
            Some(cursor) => page = PageRequest::after(cursor, limit),
            None => break,
        }
    }
    assert!(
        found.windows(2).all(|pair| pair[0] > pair[1]),
        "newest first, each once: {found:?}"
    );
    found
}

/// `ids` newest first.
fn newest_first(ids: impl IntoIterator<Item = Vec<JobId>>) -> Vec<JobId> {
    let mut all: Vec<JobId> = ids.into_iter().flatten().collect();
    all.sort_unstable_by(|a, b| b.cmp(a));
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_filter_selects_exactly_its_jobs() {
    let db = Db::new().await;
    let [due, scheduled, running, done, dead, cancelled, mail, other] = db
        .insert_all([
            JobRow::new("resize").count(3),
            JobRow::new("resize").due_in(hours(1)).count(2),
            JobRow::new("resize").state(Running),
            JobRow::new("resize")
                .state(Done)
                .finished_ago(hours(2))
                .count(4),
            JobRow::new("resize")
                .state(Dead)
                .finished_ago(minutes(5))
                .errors(failed("Connection REFUSED by upstream")),
            JobRow::new("resize")
                .state(Cancelled)
                .finished_ago(minutes(30)),
            JobRow::new("send_email").queue("mail").count(2),
            JobRow::new("send_email")
                .state(Done)
                .errors(failed("timed out"))
                .finished_ago(minutes(1)),
        ])
        .await;
    let all = newest_first([
        due.clone(),
        scheduled.clone(),
        running.clone(),
        done.clone(),
        dead.clone(),
        cancelled.clone(),
        mail.clone(),
        other.clone(),
    ]);
    let found = |filter: JobFilter| {
        let pool = db.pool.clone();
        async move { every_page(&pool, &filter, 2).await }
    };

    assert_eq!(found(JobFilter::all()).await, all);
    assert_eq!(found(JobFilter::all().id(dead[0])).await, dead);
    assert_eq!(
        found(JobFilter::all().kind("send_email")).await,
        newest_first([mail.clone(), other.clone()])
    );
    assert_eq!(
        found(JobFilter::all().queue("mail")).await,
        newest_first([mail.clone()])
    );
    let by_status = [
        (JobStatus::Ready, newest_first([due.clone(), mail.clone()])),
        (JobStatus::Scheduled, newest_first([scheduled.clone()])),
        (JobStatus::Running, running.clone()),
        (JobStatus::Done, newest_first([done.clone(), other.clone()])),
        (JobStatus::Dead, dead.clone()),
        (JobStatus::Cancelled, cancelled.clone()),
    ];
    for (status, expected) in &by_status {
        assert_eq!(
            &found(JobFilter::all().status(*status)).await,
            expected,
            "{status}"
        );
        // The same status within one kind takes the kind's indexes: same answer.
        let of_resize: Vec<JobId> = expected
            .iter()
            .copied()
            .filter(|id| !mail.contains(id) && !other.contains(id))
            .collect();
        assert_eq!(
            found(JobFilter::all().kind("resize").status(*status)).await,
            of_resize,
            "resize {status}"
        );
    }
    // Error text, in any case, within any kind or one.
    assert_eq!(found(JobFilter::all().error_text("refused")).await, dead);
    assert_eq!(
        found(JobFilter::all().kind("send_email").error_text("TIMED")).await,
        other
    );
    assert!(found(JobFilter::all().error_text("no such thing"))
        .await
        .is_empty());
    // Time ranges: enqueued (all just now) and finished.
    let now = Utc::now();
    assert_eq!(
        found(JobFilter::all().created_since(now - Span::hours(1))).await,
        all
    );
    assert!(found(JobFilter::all().created_until(now - Span::hours(1)))
        .await
        .is_empty());
    assert_eq!(
        found(JobFilter::all().finished_until(now - Span::hours(1))).await,
        newest_first([done.clone()])
    );
    assert_eq!(
        found(
            JobFilter::all()
                .finished_since(now - Span::hours(1))
                .finished_until(now)
        )
        .await,
        newest_first([dead.clone(), cancelled.clone(), other.clone()])
    );
    // Conditions add up.
    assert_eq!(
        found(
            JobFilter::all()
                .kind("resize")
                .queue("default")
                .status(JobStatus::Dead)
                .error_text("upstream")
                .finished_since(now - Span::hours(1))
        )
        .await,
        dead
    );
    assert!(found(JobFilter::all().kind("resize").queue("mail"))
        .await
        .is_empty());
    assert!(found(JobFilter::all().id(dead[0]).status(JobStatus::Done))
        .await
        .is_empty());

    // A summary says what the list needs.
    let page = admin::find_jobs(
        &db.pool,
        &JobFilter::all().id(dead[0]),
        &PageRequest::default(),
    )
    .await
    .unwrap();
    let job = &page.jobs[0];
    assert_eq!(
        (job.kind.as_str(), job.queue.as_str(), job.status),
        ("resize", "default", JobStatus::Dead)
    );
    assert_eq!((job.attempts, job.max_attempts, job.error_count), (1, 8, 1));
    assert!(job.finished_at.is_some());
    assert_eq!(
        job.last_error.as_ref().map(|error| error.error.as_str()),
        Some("Connection REFUSED by upstream")
    );
    assert_eq!(page.next, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dedupe_key_finds_its_jobs_in_every_state_and_scope() {
    let db = Db::new().await;
    let [retained_done, retained_ready, active_ready, active_done, active_dead, _, _] = db
        .insert_all([
            JobRow::new("sync").state(Done).dedupe("user:1", "retained"),
            JobRow::new("sync").dedupe("user:2", "retained"),
            JobRow::new("sync").dedupe("user:3", "active"),
            JobRow::new("sync").state(Done).dedupe("user:3", "active"),
            JobRow::new("sync").state(Dead).dedupe("user:3", "active"),
            // The same key in another kind, and another key.
            JobRow::new("mail").dedupe("user:3", "active"),
            JobRow::new("sync").state(Done).dedupe("user:30", "active"),
        ])
        .await;
    let by_key = |key: &'static str| {
        let pool = db.pool.clone();
        async move { every_page(&pool, &JobFilter::all().kind("sync").dedupe_key(key), 1).await }
    };
    assert_eq!(by_key("user:1").await, retained_done);
    assert_eq!(by_key("user:2").await, retained_ready);
    assert_eq!(
        by_key("user:3").await,
        newest_first([active_ready, active_done, active_dead.clone()])
    );
    assert!(by_key("user:4").await.is_empty());
    let dead_only = JobFilter::all()
        .kind("sync")
        .dedupe_key("user:3")
        .status(JobStatus::Dead);
    assert_eq!(every_page(&db.pool, &dead_only, 5).await, active_dead);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_list_every_match_once_while_new_jobs_arrive() {
    let db = Db::new().await;
    let [resize, _] = db
        .insert_all([
            JobRow::new("resize").count(23),
            JobRow::new("send_email").count(20),
        ])
        .await;
    for filter in [
        JobFilter::all().kind("resize"),
        JobFilter::all().status(JobStatus::Ready),
        JobFilter::all().queue("default"),
    ] {
        let before: BTreeSet<JobId> = every_page(&db.pool, &filter, MAX_PAGE_SIZE)
            .await
            .into_iter()
            .collect();
        let mut seen = Vec::new();
        let mut page = PageRequest::first(5);
        loop {
            let found = admin::find_jobs(&db.pool, &filter, &page).await.unwrap();
            seen.extend(found.jobs.iter().map(|job| job.id));
            // Jobs arrive between pages, matching the filter: newer than every cursor, they are
            // never on a later page, and they shift nothing.
            db.insert_rows(JobRow::new("resize").count(3)).await;
            match found.next {
                Some(cursor) => page = PageRequest::after(cursor, 5),
                None => break,
            }
        }
        let unique: BTreeSet<JobId> = seen.iter().copied().collect();
        assert_eq!(unique.len(), seen.len(), "each job once: {seen:?}");
        assert_eq!(
            unique, before,
            "{filter:?}: exactly the jobs there when the walk began"
        );
    }
    assert_eq!(resize.len(), 23);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_examines_a_bounded_number_of_jobs_and_goes_on_from_its_cursor() {
    let db = Db::new().await;
    let rare = db
        .insert_rows(JobRow::new("resize").queue("rare").count(3))
        .await;
    db.insert_rows(
        JobRow::new("resize")
            .state(Done)
            .count(i64::try_from(admin::find::MAX_EXAMINED).unwrap() + 50),
    )
    .await;
    let filter = JobFilter::all().queue("rare");
    let first = admin::find_jobs(&db.pool, &filter, &PageRequest::first(10))
        .await
        .unwrap();
    assert!(first.jobs.is_empty(), "the newest 10,000 jobs hold none");
    assert!(first.examination_bounded);
    let cursor = first.next.expect("a cursor to go on from");
    let second = admin::find_jobs(&db.pool, &filter, &PageRequest::after(cursor, 10))
        .await
        .unwrap();
    let ids: Vec<JobId> = second.jobs.iter().map(|job| job.id).collect();
    assert_eq!(ids, newest_first([rare]));
    assert!(!second.examination_bounded);
    assert_eq!(second.next, None);

    // With their status, they are found in one page, through the ready index.
    let ready = admin::find_jobs(
        &db.pool,
        &filter.clone().status(JobStatus::Ready),
        &PageRequest::first(10),
    )
    .await
    .unwrap();
    assert_eq!(ready.jobs.len(), 3);
    assert_eq!(ready.next, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursors_read_back_as_written_and_refuse_anything_else() {
    let cursor: Cursor = "42".parse().unwrap();
    assert_eq!(cursor.to_string(), "42");
    assert_eq!(cursor.before(), 42);
    for bad in [
        "",
        "0",
        "-1",
        "+4",
        " 4",
        "4x",
        "abc",
        "99999999999999999999",
        "4\0",
    ] {
        assert!(bad.parse::<Cursor>().is_err(), "{bad:?}");
    }
    assert_eq!("dead".parse::<JobStatus>().unwrap(), JobStatus::Dead);
    assert!("Dead".parse::<JobStatus>().is_err());
    for status in JobStatus::ALL {
        assert_eq!(status.to_string().parse::<JobStatus>().unwrap(), status);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_searches_are_refused_before_the_database() {
    // Nothing listens there: any statement sent would fail as a database error.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(std::time::Duration::from_secs(2))
        .connect_lazy("postgres://root@127.0.0.1:1/nowhere")
        .unwrap();
    let page = PageRequest::default();
    let refused = [
        (JobFilter::all(), PageRequest::first(0)),
        (JobFilter::all(), PageRequest::first(MAX_PAGE_SIZE + 1)),
        (JobFilter::all().kind(""), page),
        (JobFilter::all().kind("re size"), page),
        (JobFilter::all().queue(""), page),
        (JobFilter::all().queue("ma\0il"), page),
        (JobFilter::all().dedupe_key("user:1"), page),
        (JobFilter::all().kind("sync").dedupe_key(""), page),
        (JobFilter::all().kind("sync").dedupe_key("a\0b"), page),
        (JobFilter::all().error_text(""), page),
        (JobFilter::all().error_text("time\0out"), page),
        (
            JobFilter::all().error_text("x".repeat(admin::find::MAX_ERROR_TEXT_LEN + 1)),
            page,
        ),
        (
            JobFilter::all()
                .created_since(Utc::now())
                .created_until(Utc::now() - Span::hours(1)),
            page,
        ),
        (
            JobFilter::all()
                .finished_since(Utc::now())
                .finished_until(Utc::now() - Span::seconds(1)),
            page,
        ),
    ];
    for (filter, page) in refused {
        let result = admin::find_jobs(&pool, &filter, &page).await;
        assert!(
            matches!(
                result,
                Err(AdminError::InvalidFilter { .. }
                    | AdminError::InvalidText { .. }
                    | AdminError::InvalidQueue(_))
            ),
            "{filter:?} {page:?}: {result:?}"
        );
    }
    // A valid search does reach the database (and fails there).
    assert!(matches!(
        admin::find_jobs(&pool, &JobFilter::all(), &page).await,
        Err(AdminError::Database(_))
    ));
}

/// A search shape bound as `find_jobs` binds it: `$1`..`$13`.
#[derive(Default)]
struct Shape {
    id: Option<i64>,
    kind: Option<&'static str>,
    queue: Option<&'static str>,
    status: Option<&'static str>,
    dedupe_key: Option<&'static str>,
    created_since_hours: Option<i64>,
    finished_since_hours: Option<i64>,
    error_text: Option<&'static str>,
    before: Option<i64>,
}

impl Shape {
    fn statement(&self) -> &'static str {
        if self.id.is_some() {
            sql::FIND_BY_ID
        } else if self.kind.is_some() && self.dedupe_key.is_some() {
            sql::FIND_BY_DEDUPE_KEY
        } else if self.kind.is_some() {
            sql::FIND_OF_KIND
        } else if matches!(
            self.status,
            Some("waiting" | "ready" | "scheduled" | "running" | "dead")
        ) {
            sql::FIND_LIVE
        } else {
            sql::FIND_RECENT
        }
    }
}

/// Rows and index entries read from `jobs_queue` by every node of a plan that was run (rows
/// times loops, plus those a filter removed).
fn rows_read(nodes: &[Value]) -> i64 {
    nodes
        .iter()
        .filter(|node| node["Relation Name"] == "jobs_queue")
        .map(|node| {
            let loops = node["Actual Loops"].as_i64().unwrap_or(1);
            let rows = node["Actual Rows"].as_i64().unwrap_or(0);
            let removed = node["Rows Removed by Filter"].as_i64().unwrap_or(0)
                + node["Rows Removed by Index Recheck"].as_i64().unwrap_or(0);
            rows * loops + removed
        })
        .sum()
}

/// Runs the search of each shape (`EXPLAIN ANALYZE`, rolled back) on `db`, asserts that none
/// scans `jobs_queue` whole nor reads more than a page examines (an index entry and a row each)
/// plus the `live` jobs a state's index may hold, and returns the rows and entries each read.
async fn rows_read_by_shape(
    db: &Db,
    shapes: Vec<(&'static str, Shape)>,
    live: i64,
) -> std::collections::HashMap<&'static str, i64> {
    let examine = i64::try_from(admin::find::MAX_EXAMINED).unwrap();
    let newest: i64 = db.count("SELECT max(id) FROM jobs_queue").await;
    let mut read_by_shape = std::collections::HashMap::new();
    for (name, shape) in shapes {
        let now = Utc::now();
        let statement = explain_analyze(shape.statement());
        let query = sqlx::query_scalar(&statement)
            .bind(shape.id)
            .bind(shape.kind)
            .bind(shape.queue)
            .bind(shape.status)
            .bind(shape.dedupe_key)
            .bind(
                shape
                    .created_since_hours
                    .map(|hours| now - Span::hours(hours)),
            )
            .bind(None::<chrono::DateTime<Utc>>)
            .bind(
                shape
                    .finished_since_hours
                    .map(|hours| now - Span::hours(hours)),
            )
            .bind(None::<chrono::DateTime<Utc>>)
            .bind(shape.error_text)
            .bind(shape.before.unwrap_or(newest + 1))
            .bind(examine)
            .bind(50_i64);
        let plan = plan_of(db, name, query).await;
        let nodes = plan_nodes(&plan);
        assert_no_seq_scan(&scans_of(&nodes, "jobs_queue"), name);
        let read = rows_read(&nodes);
        println!(
            "{name}: {read} rows read in {} ms through {:?}",
            plan[0]["Execution Time"],
            indexes_read(&nodes)
        );
        assert!(
            read <= 2 * examine + live,
            "{name} reads {read} rows, more than a page's bound"
        );
        read_by_shape.insert(name, read);
    }
    read_by_shape
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_search_shape_reads_a_bounded_number_of_rows_among_a_million_retained() {
    let db = Db::new().await;
    // A week of retained jobs: a million done and cancelled jobs in 5 queues, of 200 kinds of
    // 3,750 jobs, one of 20,000 and one of 250,000, a few with an error history and an active
    // dedupe key; none of the kinds searched below among the live ones.
    db.execute(
        "INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, run_at,
                                 created_at, finished_at, dedupe_key, dedupe_scope, errors)
         SELECT CASE WHEN n % 4 = 1 THEN 'big' WHEN n % 50 = 3 THEN 'medium'
                     ELSE 'kind_' || (n % 200) END,
                'queue_' || (n % 5), '{}'::jsonb,
                CASE WHEN n % 50 = 0 THEN 'cancelled' ELSE 'done' END, 1, 8,
                now() - make_interval(secs => (1000000 - n) * 0.6),
                now() - make_interval(secs => (1000000 - n) * 0.6),
                now() - make_interval(secs => (1000000 - n) * 0.6 - 1),
                CASE WHEN n % 10 = 0 THEN 'key:' || n END,
                CASE WHEN n % 10 = 0 THEN 'active' END,
                CASE WHEN n % 100 = 0
                     THEN '[{\"attempt\": 1, \"at\": \"2030-01-01\", \"kind\": \"transient\", \"error\": \"upstream timed out\"}]'::jsonb
                     ELSE '[]'::jsonb END
         FROM generate_series(1, 1000000) AS n",
    )
    .await;
    // The live jobs and a rare kind searched for among the retained ones.
    db.insert_all([
        JobRow::new("resize").count(2_000),
        JobRow::new("resize").due_in(hours(1)).count(500),
        JobRow::new("resize").state(Running).count(16),
        JobRow::new("resize").state(Dead).count(300),
        JobRow::new("resize").state(Waiting).count(200),
        JobRow::new("send_receipt").state(Done).count(40),
        JobRow::new("send_receipt").state(Cancelled).count(5),
        JobRow::new("send_receipt").dedupe("order:7", "retained"),
        JobRow::new("sync").state(Done).dedupe("user:7", "active"),
    ])
    .await;
    db.execute("VACUUM ANALYZE jobs_queue").await;

    let shapes = vec![
        ("nothing", Shape::default()),
        (
            "a page in the middle",
            Shape {
                before: Some(500_000),
                ..Shape::default()
            },
        ),
        (
            "id",
            Shape {
                id: Some(123_456),
                ..Shape::default()
            },
        ),
        (
            "queue",
            Shape {
                queue: Some("queue_3"),
                ..Shape::default()
            },
        ),
        (
            "a rare queue",
            Shape {
                queue: Some("nowhere"),
                ..Shape::default()
            },
        ),
        (
            "done",
            Shape {
                status: Some("done"),
                ..Shape::default()
            },
        ),
        (
            "cancelled",
            Shape {
                status: Some("cancelled"),
                ..Shape::default()
            },
        ),
        (
            "ready",
            Shape {
                status: Some("ready"),
                ..Shape::default()
            },
        ),
        (
            "ready in a queue",
            Shape {
                status: Some("ready"),
                queue: Some("default"),
                ..Shape::default()
            },
        ),
        (
            "scheduled",
            Shape {
                status: Some("scheduled"),
                ..Shape::default()
            },
        ),
        (
            "running",
            Shape {
                status: Some("running"),
                ..Shape::default()
            },
        ),
        (
            "dead",
            Shape {
                status: Some("dead"),
                ..Shape::default()
            },
        ),
        (
            "waiting",
            Shape {
                status: Some("waiting"),
                ..Shape::default()
            },
        ),
        (
            "a rare kind",
            Shape {
                kind: Some("send_receipt"),
                ..Shape::default()
            },
        ),
        (
            "an absent kind",
            Shape {
                kind: Some("nothing_like_it"),
                ..Shape::default()
            },
        ),
        (
            "a common kind",
            Shape {
                kind: Some("kind_100"),
                ..Shape::default()
            },
        ),
        (
            "a kind of 20,000",
            Shape {
                kind: Some("medium"),
                ..Shape::default()
            },
        ),
        (
            "a kind of 250,000",
            Shape {
                kind: Some("big"),
                ..Shape::default()
            },
        ),
        (
            "a kind of 250,000, cancelled",
            Shape {
                kind: Some("big"),
                status: Some("cancelled"),
                ..Shape::default()
            },
        ),
        (
            "a kind, done",
            Shape {
                kind: Some("send_receipt"),
                status: Some("done"),
                ..Shape::default()
            },
        ),
        (
            "a kind, cancelled",
            Shape {
                kind: Some("send_receipt"),
                status: Some("cancelled"),
                ..Shape::default()
            },
        ),
        (
            "a kind, ready",
            Shape {
                kind: Some("resize"),
                status: Some("ready"),
                ..Shape::default()
            },
        ),
        (
            "a kind, ready in a queue",
            Shape {
                kind: Some("resize"),
                status: Some("ready"),
                queue: Some("default"),
                ..Shape::default()
            },
        ),
        (
            "a kind, running",
            Shape {
                kind: Some("resize"),
                status: Some("running"),
                ..Shape::default()
            },
        ),
        (
            "a kind, dead",
            Shape {
                kind: Some("resize"),
                status: Some("dead"),
                ..Shape::default()
            },
        ),
        (
            "a kind, waiting",
            Shape {
                kind: Some("resize"),
                status: Some("waiting"),
                ..Shape::default()
            },
        ),
        (
            "a kind in a queue",
            Shape {
                kind: Some("big"),
                queue: Some("queue_2"),
                ..Shape::default()
            },
        ),
        (
            "a retained dedupe key",
            Shape {
                kind: Some("send_receipt"),
                dedupe_key: Some("order:7"),
                ..Shape::default()
            },
        ),
        (
            "a finished active dedupe key",
            Shape {
                kind: Some("sync"),
                dedupe_key: Some("user:7"),
                ..Shape::default()
            },
        ),
        (
            "an absent dedupe key",
            Shape {
                kind: Some("kind_10"),
                dedupe_key: Some("key:11"),
                ..Shape::default()
            },
        ),
        (
            "error text",
            Shape {
                error_text: Some("TIMED OUT"),
                ..Shape::default()
            },
        ),
        (
            "a kind's error text",
            Shape {
                kind: Some("kind_100"),
                error_text: Some("timed out"),
                ..Shape::default()
            },
        ),
        (
            "enqueued in the last hour",
            Shape {
                created_since_hours: Some(1),
                ..Shape::default()
            },
        ),
        (
            "enqueued long ago",
            Shape {
                created_since_hours: Some(-1),
                ..Shape::default()
            },
        ),
        (
            "finished in the last hour, done",
            Shape {
                finished_since_hours: Some(1),
                status: Some("done"),
                ..Shape::default()
            },
        ),
        (
            "everything at once",
            Shape {
                kind: Some("kind_100"),
                queue: Some("queue_0"),
                status: Some("cancelled"),
                created_since_hours: Some(200),
                finished_since_hours: Some(200),
                error_text: Some("upstream"),
                ..Shape::default()
            },
        ),
    ];
    // The live jobs a state's index holds: what a sorted branch may read whole.
    let live = 2_000 + 500 + 16 + 300 + 200;
    let read_by_shape = rows_read_by_shape(&db, shapes, live).await;
    // Where an index leads straight to the matches, a page reads about what it shows (an index
    // entry, then the row): the jobs of a rare kind, or a dedupe key's, are not looked for among
    // the million others.
    for (name, most) in [
        ("nothing", 51),
        ("id", 1),
        ("a rare kind", 2 * (16 + 1 + 40 + 5)),
        ("an absent kind", 16),
        ("a kind, done", 2 * 40),
        ("a kind, cancelled", 2 * 5),
        ("a kind of 250,000, cancelled", 0),
        ("a kind, dead", 300 + 51),
        ("a retained dedupe key", 1),
        ("a finished active dedupe key", 1),
        ("an absent dedupe key", 0),
    ] {
        let read = read_by_shape[name];
        assert!(read <= most, "{name} reads {read} rows, more than {most}");
    }
    // A backlog: 300,000 ready jobs of one kind. The live states' branches read their index
    // alone, sorted, and fetch only the page's rows: no search turns into a scan of the table.
    db.insert_rows(JobRow::new("backlog").count(300_000)).await;
    db.execute("VACUUM ANALYZE jobs_queue").await;
    let shapes = vec![
        (
            "ready, under a backlog",
            Shape {
                status: Some("ready"),
                ..Shape::default()
            },
        ),
        (
            "ready in a queue, under a backlog",
            Shape {
                status: Some("ready"),
                queue: Some("default"),
                ..Shape::default()
            },
        ),
        (
            "the backlog's kind",
            Shape {
                kind: Some("backlog"),
                ..Shape::default()
            },
        ),
        (
            "the backlog's kind, ready",
            Shape {
                kind: Some("backlog"),
                status: Some("ready"),
                ..Shape::default()
            },
        ),
        (
            "a kind, ready, under a backlog",
            Shape {
                kind: Some("resize"),
                status: Some("ready"),
                ..Shape::default()
            },
        ),
        (
            "a rare kind, under a backlog",
            Shape {
                kind: Some("send_receipt"),
                ..Shape::default()
            },
        ),
        (
            "a kind of 250,000, under a backlog",
            Shape {
                kind: Some("big"),
                ..Shape::default()
            },
        ),
        (
            "dead, under a backlog",
            Shape {
                status: Some("dead"),
                ..Shape::default()
            },
        ),
        ("nothing, under a backlog", Shape::default()),
    ];
    rows_read_by_shape(&db, shapes, live + 300_000).await;
}
