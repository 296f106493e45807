//! What the pages show.

use jobs_console::{router, ConsoleConfig};
use jobs_testkit::{minutes, JobRow, RowState};

use crate::client::Client;
use crate::console;

#[tokio::test]
async fn the_overview_shows_each_queue_by_state_and_its_pause() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    db.insert_all([
        JobRow::new("send_receipt").queue("emails").count(3),
        JobRow::new("send_receipt")
            .queue("emails")
            .due_in(minutes(5)),
        JobRow::new("resize").queue("images").state(RowState::Dead),
    ])
    .await;
    jobs::admin::pause_queue(&db.pool, "images", "ops", Some("disk full"))
        .await
        .unwrap();
    let page = client.get("/").await;
    page.shows(
        r#"<tr data-queue="emails"><td>emails</td><td class="num">3</td><td class="num">1</td>"#,
    )
    .shows("paused")
    .shows("by ops")
    .shows(r#"href="/dead?queue=images""#)
    .shows("Resume")
    .shows("Pause");
}

#[tokio::test]
async fn text_from_the_database_is_escaped() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    let [ids] = db
        .insert_all([JobRow::new("<script>alert('kind')</script>")
            .state(RowState::Dead)
            .errors(serde_json::json!([{
                "attempt": 1, "at": "2026-12-01T00:00:00Z", "kind": "permanent",
                "error": "<img src=x onerror=alert(1)>"
            }]))])
        .await;
    let page = client.get("/dead").await;
    page.hides("<script>alert")
        .hides("<img src=x")
        .shows("&lt;script&gt;")
        .shows("&lt;img src=x");
    let page = client.get(&format!("/jobs/{}", ids[0])).await;
    page.hides("<script>alert")
        .hides("<img src=x")
        .shows("&lt;img src=x onerror=alert(1)&gt;");
}

#[tokio::test]
async fn the_job_page_shows_everything_but_hidden_payloads() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    let [ids] = db
        .insert_all([JobRow::new("send_receipt").dedupe("receipt:1042", "retained")])
        .await;
    db.execute(&format!(
        "UPDATE jobs_queue SET payload = '{{\"email\": \"ana@example.com\"}}' WHERE id = {}",
        ids[0]
    ))
    .await;
    let path = format!("/jobs/{}", ids[0]);
    client
        .get(&path)
        .await
        .shows("ana@example.com")
        .shows("receipt:1042")
        .shows("send_receipt")
        .shows("Run now");

    let mut hidden = Client::new(router(
        db.pool.clone(),
        ConsoleConfig::new().hide_payloads(true),
    ));
    hidden
        .get(&path)
        .await
        .hides("ana@example.com")
        .shows("Hidden");
}

#[tokio::test]
async fn the_job_page_shows_a_done_jobs_output_escaped_unless_payloads_are_hidden() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    let [ids] = db
        .insert_all([JobRow::new("charge_card").state(RowState::Done)])
        .await;
    db.execute(&format!(
        "UPDATE jobs_queue SET output = '{{\"number\": \"<b>R-7</b>\"}}' WHERE id = {}",
        ids[0]
    ))
    .await;
    let path = format!("/jobs/{}", ids[0]);
    client
        .get(&path)
        .await
        .shows("<h2>Output</h2>")
        .shows("&lt;b&gt;R-7&lt;/b&gt;")
        .hides("<b>R-7");

    let mut hidden = Client::new(router(
        db.pool.clone(),
        ConsoleConfig::new().hide_payloads(true),
    ));
    hidden
        .get(&path)
        .await
        .shows("<h2>Output</h2>")
        .hides("R-7");
}

#[tokio::test]
async fn a_console_nested_under_a_path_links_inside_it() {
    let (db, _) = console(ConsoleConfig::new()).await;
    let app = axum::Router::new().nest(
        "/ops/jobs",
        router(db.pool.clone(), ConsoleConfig::new().base_path("/ops/jobs")),
    );
    let mut client = Client::new(app);
    let page = client.get("/ops/jobs/dead").await;
    assert_eq!(page.status, axum::http::StatusCode::OK, "{}", page.body);
    page.shows(r#"href="/ops/jobs/console.css""#)
        .shows(r#"href="/ops/jobs/schedules""#);
    let cookie = page.headers["set-cookie"].to_str().unwrap();
    assert!(cookie.contains("Path=/ops/jobs"), "{cookie}");
}

#[tokio::test]
async fn the_workers_page_shows_live_workers_and_what_check_would_report() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    db.insert_all([JobRow::new("send_receipt")
        .queue("emails")
        .due_for(minutes(10))])
        .await;
    let page = client.get("/workers").await;
    page.shows("No worker process is running")
        .shows("queue_unserved");

    db.execute(
        "INSERT INTO jobs_workers (id, host, pid, version, queues, kinds, started_at, last_seen_at, gone_after)
         VALUES (gen_random_uuid(), 'web-1', 4242, '0.1.0',
                 '[{\"queue\": \"emails\", \"concurrency\": 16}]', ARRAY['send_receipt'],
                 now(), now(), interval '15 seconds')",
    )
    .await;
    let page = client.get("/workers").await;
    page.shows("web-1")
        .shows("emails (16)")
        .shows("send_receipt")
        .hides("queue_unserved");
}

#[tokio::test]
async fn the_overview_and_workers_pages_show_each_limit_in_use() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    client.get("/").await.hides(r#"<table id="limits">"#);
    let [running, waiting] = db
        .insert_all([
            JobRow::new("charge").state(RowState::Running).count(2),
            JobRow::new("charge").count(2),
        ])
        .await;
    db.execute(&format!(
        "UPDATE jobs_queue SET limit_key = CASE WHEN id = {} THEN 'merchant-2' ELSE 'merchant-1' END
         WHERE id IN ({}, {}, {}, {})",
        waiting[1], running[0], running[1], waiting[0], waiting[1]
    ))
    .await;
    db.execute(
        r#"INSERT INTO jobs_workers (id, host, pid, version, queues, kinds, limits, started_at,
                                     last_seen_at, gone_after)
           VALUES (gen_random_uuid(), 'web-1', 4242, '0.1.0',
                   '[{"queue": "default", "concurrency": 8}]', ARRAY['charge'],
                   '[{"kind": "charge", "max_running": 10, "rate_jobs": null,
                      "rate_window_secs": null, "max_running_per_key": 2}]',
                   now(), now(), interval '15 seconds')"#,
    )
    .await;
    client
        .get("/")
        .await
        .shows(r#"<tr data-kind="charge"><td>charge</td><td>at most 10 running, at most 2 running per key</td><td class="num">2 of 10</td><td class="num">-</td><td class="num">1</td><td class="num"><span class="bad">1</span></td></tr>"#);
    client
        .get("/workers")
        .await
        .shows("<td>charge: at most 10 running, at most 2 running per key</td>");
}

#[tokio::test]
async fn the_jobs_page_searches_by_dedupe_key_and_pages_newest_first() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    let [keyed, _, many] = db
        .insert_all([
            JobRow::new("send_receipt").dedupe("receipt:1042", "retained"),
            JobRow::new("send_receipt").dedupe("receipt:7", "retained"),
            JobRow::new("resize").queue("images").count(60),
        ])
        .await;
    let page = client
        .get("/jobs?kind=send_receipt&dedupe_key=receipt%3A1042")
        .await;
    page.shows(&format!(r#"<tr data-id="{}">"#, keyed[0]))
        .shows("receipt:1042")
        .hides("receipt:7");

    let first = client.get("/jobs?queue=images").await;
    first
        .shows(&format!(r#"<tr data-id="{}">"#, many[59]))
        .hides(&format!(r#"<tr data-id="{}">"#, many[9]));
    let next = format!("/jobs?queue=images&amp;after={}", many[10]);
    first.shows(&next);
    let second = client
        .get(&format!("/jobs?queue=images&after={}", many[10]))
        .await;
    second
        .shows(&format!(r#"<tr data-id="{}">"#, many[9]))
        .shows(&format!(r#"<tr data-id="{}">"#, many[0]))
        .hides(&format!(r#"<tr data-id="{}">"#, many[10]))
        .hides("Next page");
}

#[tokio::test]
async fn a_search_the_filter_refuses_says_why() {
    let (_db, mut client) = console(ConsoleConfig::new()).await;
    for (query, why) in [
        ("/jobs?dedupe_key=receipt", "dedupe key"),
        ("/jobs?state=sleeping", "unknown job status"),
        ("/jobs?since=yesterday", "is not a time"),
        ("/jobs?after=-3", "invalid cursor"),
    ] {
        let page = client.get(query).await;
        assert_eq!(page.status, axum::http::StatusCode::BAD_REQUEST, "{query}");
        page.shows(why);
    }
}

#[tokio::test]
async fn a_filter_cancel_takes_whole_is_offered_as_one_action() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    db.insert_all([JobRow::new("send_newsletter").due_in(minutes(30)).count(3)])
        .await;
    client
        .get("/jobs?kind=send_newsletter&state=scheduled")
        .await
        .shows("Cancel every scheduled job of this filter");
    client
        .get("/jobs?kind=send_newsletter&state=scheduled&error=x")
        .await
        .hides("Cancel every");
}
