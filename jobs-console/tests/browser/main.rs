//! The console in a real headless Chromium, over a real database with a real worker: the
//! clicks an operator makes, and a screenshot of every page.

mod harness;
mod kinds;

use std::time::Duration;

use jobs::{Worker, WorkerConfig, WorkerHandle};
use jobs_console::ConsoleConfig;
use jobs_testkit::{wait_until, Db, JobRow, RowState};
use sqlx::PgPool;

use harness::{serve_console, Browser};
use kinds::{resize, send_receipt, upload};

/// A worker of every kind above, polling often, with `pool` as its state.
fn start_worker(pool: &PgPool) -> WorkerHandle {
    start_worker_of(
        pool,
        &["resize", "send_receipt", "upload", "nightly_report"],
    )
}

/// A worker of `kinds`, polling often, with `pool` as its state.
fn start_worker_of(pool: &PgPool, kinds: &[&str]) -> WorkerHandle {
    Worker::builder(pool.clone())
        .kinds(kinds.iter().copied())
        .state(pool.clone())
        .config(WorkerConfig {
            poll_interval: Duration::from_millis(50),
            ..WorkerConfig::default()
        })
        .build()
        .expect("worker builds")
        .start()
}

/// The state of job `id`.
async fn state_of(pool: &PgPool, id: i64) -> String {
    sqlx::query_scalar("SELECT state FROM jobs_queue WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("job state")
}

/// Waits until job `id` is in `state`.
async fn wait_for_state(pool: &PgPool, id: i64, state: &str) {
    wait_until(&format!("job {id} to be {state}"), || async {
        state_of(pool, id).await == state
    })
    .await;
}

/// Waits until the database's clock is `span` past what it is now (time for a worker to poll
/// many times), without sleeping on the test's own clock.
async fn wait_for_database_time(pool: &PgPool, span: Duration) {
    let start: f64 = sqlx::query_scalar("SELECT extract(epoch FROM clock_timestamp())::float8")
        .fetch_one(pool)
        .await
        .expect("clock");
    wait_until("the database clock to move on", || async {
        let now: f64 = sqlx::query_scalar("SELECT extract(epoch FROM clock_timestamp())::float8")
            .fetch_one(pool)
            .await
            .expect("clock");
        now - start >= span.as_secs_f64()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_a_queue_in_the_console_stops_every_worker_claiming_from_it() {
    let db = Db::migrated().await;
    let worker = start_worker(&db.pool);
    let url = serve_console(db.pool.clone(), ConsoleConfig::new()).await;
    let browser = Browser::start().await;

    let first = resize::enqueue(&db.pool, 1).await.unwrap().id();
    wait_for_state(&db.pool, first, "done").await;
    browser.open(&url).await;
    browser.click(r#"tr[data-queue="images"] button"#).await;
    browser.wait_for_text("Paused queue images").await;

    let held = resize::enqueue(&db.pool, 2).await.unwrap().id();
    let other = send_receipt::enqueue(&db.pool, 1042).await.unwrap().id();
    wait_for_state(&db.pool, other, "done").await;
    wait_for_database_time(&db.pool, Duration::from_millis(500)).await;
    assert_eq!(
        state_of(&db.pool, held).await,
        "ready",
        "a paused queue's job was claimed"
    );
    browser.open(&url).await;
    let row = browser.text(r#"tr[data-queue="images"]"#).await;
    assert!(row.contains("paused") && row.contains("Resume"), "{row}");

    browser.click(r#"tr[data-queue="images"] button"#).await;
    browser.wait_for_text("Resumed queue images").await;
    wait_for_state(&db.pool, held, "done").await;
    browser.close().await;
    worker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_job_replayed_from_the_console_runs_again() {
    let db = Db::migrated().await;
    db.execute("CREATE TABLE uploadable (file text PRIMARY KEY)")
        .await;
    let worker = start_worker(&db.pool);
    let url = serve_console(db.pool.clone(), ConsoleConfig::new()).await;
    let browser = Browser::start().await;

    let id = upload::enqueue(&db.pool, "cat.png".to_owned())
        .await
        .unwrap()
        .id();
    wait_for_state(&db.pool, id, "dead").await;
    browser.open(&format!("{url}/dead")).await;
    browser.click(&format!(r#"tr[data-id="{id}"] a"#)).await;
    browser
        .wait_for_text("the storage bucket refused the upload")
        .await;

    db.execute("INSERT INTO uploadable VALUES ('cat.png')")
        .await;
    browser.click("button[type=submit]:not(.link)").await;
    browser.wait_for_text("Replayed 1 job").await;
    wait_for_state(&db.pool, id, "done").await;
    browser.open(&format!("{url}/jobs/{id}")).await;
    assert_eq!(browser.text("#state").await, "done");
    browser.close().await;
    worker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_discard_shows_its_preview_before_it_deletes() {
    let db = Db::migrated().await;
    db.insert_all([
        JobRow::new("upload")
            .queue("images")
            .state(RowState::Dead)
            .count(3),
        JobRow::new("send_receipt")
            .queue("emails")
            .state(RowState::Dead)
            .count(2),
    ])
    .await;
    let url = serve_console(db.pool.clone(), ConsoleConfig::new()).await;
    let browser = Browser::start().await;

    browser.open(&format!("{url}/dead")).await;
    browser.type_into("input[name=kind]", "upload").await;
    browser.click("form.filters button").await;
    browser.wait_for_text("3 dead jobs selected").await;
    browser.click("#discard-all").await;
    let preview = browser.text("#preview-count").await;
    assert!(preview.contains("Discard 3 jobs"), "{preview}");
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue").await,
        5,
        "the preview deleted something"
    );

    browser.click("#confirm").await;
    browser.wait_for_text("Discarded 3 jobs").await;
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE kind = 'upload'")
            .await,
        0
    );
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE kind = 'send_receipt'")
            .await,
        2
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_job_cancelled_from_the_console_never_runs() {
    let db = Db::migrated().await;
    let worker = start_worker(&db.pool);
    let url = serve_console(db.pool.clone(), ConsoleConfig::new()).await;
    let browser = Browser::start().await;

    let id = resize::builder(7)
        .delay(Duration::from_secs(3600))
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    browser.open(&format!("{url}/jobs/{id}")).await;
    assert_eq!(browser.text("#state").await, "ready");
    browser.click(r#"form[action="/jobs/cancel"] button"#).await;
    browser.wait_for_text("Cancelled 1 job").await;
    assert_eq!(browser.text("#state").await, "cancelled");
    assert_eq!(state_of(&db.pool, id).await, "cancelled");

    // Made due, it is still not run: the worker never claims a cancelled job.
    jobs::admin::run_now(&db.pool, &[id]).await.unwrap();
    let other = resize::enqueue(&db.pool, 8).await.unwrap().id();
    wait_for_state(&db.pool, other, "done").await;
    assert_eq!(state_of(&db.pool, id).await, "cancelled");
    browser.close().await;
    worker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_by_dedupe_key_finds_the_one_job_holding_it() {
    let db = Db::migrated().await;
    let url = serve_console(db.pool.clone(), ConsoleConfig::new()).await;
    let browser = Browser::start().await;
    let mut ids = Vec::new();
    for order in [1041, 1042, 1043] {
        ids.push(send_receipt::enqueue(&db.pool, order).await.unwrap().id());
    }

    browser.open(&format!("{url}/jobs")).await;
    browser
        .type_into("#search input[name=kind]", "send_receipt")
        .await;
    browser
        .type_into("#search input[name=dedupe_key]", "receipt:1042")
        .await;
    browser.click("#search button[type=submit]").await;
    browser.wait_for_text("receipt:1042").await;
    let rows = browser.text("#jobs tbody").await;
    assert_eq!(rows.lines().count(), 1, "one job holds the key: {rows}");
    assert!(rows.starts_with(&ids[1].to_string()), "{rows}");
    browser
        .click(&format!(r#"tr[data-id="{}"] td.num a"#, ids[1]))
        .await;
    browser.wait_for_text(&format!("Job {}", ids[1])).await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn screenshots_of_every_page() {
    let db = Db::migrated().await;
    db.execute("CREATE TABLE uploadable (file text PRIMARY KEY)")
        .await;
    let worker = start_worker(&db.pool);
    for n in 0..30 {
        resize::enqueue(&db.pool, n).await.unwrap();
        send_receipt::enqueue(&db.pool, n).await.unwrap();
    }
    let dead = upload::enqueue(&db.pool, "holiday.jpg".to_owned())
        .await
        .unwrap()
        .id();
    upload::enqueue(&db.pool, "invoice.pdf".to_owned())
        .await
        .unwrap();
    wait_for_state(&db.pool, dead, "dead").await;
    db.wait_for_count(
        "every job to end",
        "SELECT count(*) FROM jobs_queue WHERE state IN ('done', 'dead')",
        62,
    )
    .await;
    wait_until("the nightly schedule to be registered", || async {
        db.count("SELECT count(*) FROM jobs_schedules").await == 1
    })
    .await;
    worker.shutdown().await.unwrap();
    // Rows written straight to the table after the worker stopped: waiting, as a backlog would.
    db.insert_all([
        JobRow::new("send_receipt").queue("emails").count(40),
        JobRow::new("resize").queue("images").count(12),
        JobRow::new("resize")
            .queue("images")
            .due_in(Duration::from_secs(600))
            .count(3),
    ])
    .await;
    jobs::admin::pause_queue(&db.pool, "images", "ana", Some("bucket quota exceeded"))
        .await
        .unwrap();
    db.execute(
        "INSERT INTO jobs_outbox (topic, payload, state, attempts, parked_at, last_error)
         VALUES ('orders.created', '{\"order_id\": 1042}', 'parked', 5, now(), 'message larger than the stream accepts')",
    )
    .await;
    // An hour of throughput, as workers would have counted it.
    db.execute(
        "INSERT INTO jobs_throughput (minute, queue, kind, worker_id, done, retried, dead)
         SELECT date_trunc('minute', now()) - make_interval(mins => m), queue, kind,
                gen_random_uuid(),
                (40 + 30 * sin(m / 7.0) + m % 11)::int * weight, (m % 9 = 0)::int * 3 * weight,
                (m % 23 = 0)::int * weight
         FROM generate_series(1, 59) AS m,
              (VALUES ('emails', 'send_receipt', 3), ('images', 'resize', 1)) AS k(queue, kind, weight)",
    )
    .await;
    // A worker of the nightly report only: the other queues' jobs wait, and the health report
    // says so.
    let reports = start_worker_of(&db.pool, &["nightly_report"]);
    let url = serve_console(db.pool.clone(), ConsoleConfig::new()).await;
    let browser = Browser::start().await;
    for (name, path) in [
        ("overview", "/".to_owned()),
        ("jobs", "/jobs?queue=images".to_owned()),
        ("dead-letters", "/dead".to_owned()),
        ("job", format!("/jobs/{dead}")),
        ("schedules", "/schedules".to_owned()),
        ("outbox", "/outbox".to_owned()),
        ("workers", "/workers".to_owned()),
    ] {
        browser.open(&format!("{url}{path}")).await;
        browser.text("h1").await;
        browser.screenshot(name).await;
    }
    browser.open(&format!("{url}/dead")).await;
    browser.click("#discard-all").await;
    browser.text("#preview-count").await;
    browser.screenshot("discard-preview").await;
    browser.close().await;
    reports.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_page_shows_a_chain_and_a_cancel_there_reaches_what_follows() {
    let db = Db::migrated().await;
    let url = serve_console(db.pool.clone(), ConsoleConfig::new()).await;
    let browser = Browser::start().await;
    // A chain whose first job is scheduled an hour ahead: the rest waits.
    let first = resize::builder(1)
        .delay(Duration::from_secs(3600))
        .enqueue(&db.pool)
        .await
        .unwrap();
    let second = resize::builder(2)
        .after([first])
        .enqueue(&db.pool)
        .await
        .unwrap();
    let third = send_receipt::builder(3)
        .after([second])
        .enqueue(&db.pool)
        .await
        .unwrap();

    browser
        .open(&format!("{url}/jobs/{}/workflow", second.id()))
        .await;
    let rows = browser.text("#workflow-jobs tbody").await;
    assert_eq!(rows.lines().count(), 3, "the whole chain: {rows}");
    assert_eq!(rows.matches("waiting").count(), 2, "{rows}");
    browser.screenshot("workflow").await;

    browser
        .click(&format!(r#"tr[data-job="{}"] td.num a"#, second.id()))
        .await;
    browser.wait_for_text(&format!("Job {}", second.id())).await;
    assert_eq!(browser.text("#state").await, "waiting");
    browser.click(r#"form[action="/jobs/cancel"] button"#).await;
    browser.wait_for_text("Cancelled 1 job").await;
    assert_eq!(state_of(&db.pool, second.id()).await, "cancelled");
    assert_eq!(
        state_of(&db.pool, third.id()).await,
        "cancelled",
        "what runs after a cancelled job is cancelled too"
    );
    assert_eq!(state_of(&db.pool, first.id()).await, "ready");
    browser
        .open(&format!("{url}/jobs/{}/workflow", third.id()))
        .await;
    let rows = browser.text("#workflow-jobs tbody").await;
    assert_eq!(rows.matches("cancelled").count(), 2, "{rows}");
    browser.close().await;
}
