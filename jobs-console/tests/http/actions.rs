//! What the controls change.

use axum::http::StatusCode;
use jobs::admin;
use jobs_console::ConsoleConfig;
use jobs_testkit::{minutes, JobRow, RowState};

use crate::console;

#[tokio::test]
async fn a_bulk_discard_previews_the_count_and_changes_nothing_until_confirmed() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    db.insert_all([
        JobRow::new("resize").state(RowState::Dead).count(3),
        JobRow::new("send_receipt").state(RowState::Dead).count(2),
    ])
    .await;
    client
        .get("/dead?kind=resize")
        .await
        .shows("3 dead jobs selected");
    let page = client
        .post("/dead/discard", &[("kind", "resize"), ("queue", "")])
        .await;
    assert_eq!(page.status, StatusCode::OK);
    page.shows("Discard 3 jobs")
        .shows(r#"name="confirm" value="yes""#);
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue").await, 5);

    let page = client
        .post(
            "/dead/discard",
            &[("kind", "resize"), ("queue", ""), ("confirm", "yes")],
        )
        .await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(
        page.location.as_deref(),
        Some("/dead?done=Discarded%203%20jobs")
    );
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE kind = 'send_receipt'")
            .await,
        2
    );
    assert_eq!(db.count("SELECT count(*) FROM jobs_queue").await, 2);
}

#[tokio::test]
async fn selected_dead_jobs_are_replayed_after_the_preview() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    let [ids] = db
        .insert_all([JobRow::new("resize").state(RowState::Dead).count(3)])
        .await;
    client.get("/dead").await;
    let (first, second) = (ids[0].to_string(), ids[1].to_string());
    let page = client
        .post("/dead/replay", &[("id", &first), ("id", &second)])
        .await;
    page.shows("Replay 2 jobs");
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'ready'")
            .await,
        0
    );
    client
        .post(
            "/dead/replay",
            &[("id", &first), ("id", &second), ("confirm", "yes")],
        )
        .await;
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'ready'")
            .await,
        2
    );
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'dead'")
            .await,
        1
    );
}

#[tokio::test]
async fn run_now_makes_a_waiting_job_due() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    let [ids] = db
        .insert_all([JobRow::new("resize").due_in(minutes(30))])
        .await;
    let id = ids[0].to_string();
    client.get(&format!("/jobs/{id}")).await.shows("Run now");
    let page = client.post("/jobs/run-now", &[("id", &id)]).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    client
        .get(page.location.as_deref().unwrap())
        .await
        .shows("is due now");
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE run_at <= now()")
            .await,
        1
    );
}

#[tokio::test]
async fn pausing_and_resuming_a_queue_from_the_overview() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    db.insert_all([JobRow::new("resize").queue("images")]).await;
    client.get("/").await;
    let page = client
        .post(
            "/queues/pause",
            &[("queue", "images"), ("reason", "disk full")],
        )
        .await;
    client
        .get(page.location.as_deref().unwrap())
        .await
        .shows("Paused queue images");
    let pauses = admin::paused_queues(&db.pool).await.unwrap();
    assert_eq!(pauses[0].reason.as_deref(), Some("disk full"));
    let page = client.post("/queues/resume", &[("queue", "images")]).await;
    client
        .get(page.location.as_deref().unwrap())
        .await
        .shows("Resumed queue images");
    assert!(admin::paused_queues(&db.pool).await.unwrap().is_empty());

    let page = client
        .post("/queues/pause", &[("queue", "bad queue name!")])
        .await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST);
    page.shows("invalid queue name");
}

#[tokio::test]
async fn triggering_an_unknown_schedule_is_not_found() {
    let (_db, mut client) = console(ConsoleConfig::new()).await;
    client
        .get("/schedules")
        .await
        .shows("No schedule is registered");
    let page = client
        .post("/schedules/trigger", &[("name", "nightly")])
        .await;
    assert_eq!(page.status, StatusCode::NOT_FOUND);
    page.shows("no schedule named nightly");
}

#[tokio::test]
async fn a_job_cancelled_from_its_page_records_who_asked() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    let [ids] = db
        .insert_all([JobRow::new("resize").due_in(minutes(30))])
        .await;
    let id = ids[0].to_string();
    client.get(&format!("/jobs/{id}")).await.shows("Cancel");
    let page = client
        .post("/jobs/cancel", &[("id", &id), ("confirm", "yes")])
        .await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    client
        .get(page.location.as_deref().unwrap())
        .await
        .shows("Cancelled 1 job")
        .shows(">cancelled<")
        .shows("by console");
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'cancelled'")
            .await,
        1
    );
}

#[tokio::test]
async fn a_bulk_cancel_by_filter_previews_the_count_and_cancels_only_once_confirmed() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    db.insert_all([
        JobRow::new("send_newsletter")
            .queue("mail")
            .due_in(minutes(30))
            .count(4),
        JobRow::new("send_newsletter").queue("mail").count(2),
        JobRow::new("send_receipt")
            .queue("mail")
            .due_in(minutes(30))
            .count(3),
    ])
    .await;
    client.get("/").await;
    let fields = [
        ("kind", "send_newsletter"),
        ("queue", "mail"),
        ("state", "scheduled"),
    ];
    let page = client.post("/jobs/cancel", &fields).await;
    assert_eq!(page.status, StatusCode::OK);
    page.shows("Cancel 4 jobs");
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'cancelled'")
            .await,
        0
    );
    let mut confirmed = fields.to_vec();
    confirmed.extend([("confirm", "yes"), ("reason", "sent twice")]);
    let page = client.post("/jobs/cancel", &confirmed).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(
        db.count(
            "SELECT count(*) FROM jobs_queue WHERE state = 'cancelled' AND cancel_reason = 'sent twice'"
        )
        .await,
        4
    );

    let page = client.post("/jobs/cancel", &[("state", "running")]).await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST);
    let page = client
        .post("/jobs/cancel", &[("kind", ""), ("confirm", "yes")])
        .await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST);
    page.shows("needs at least one condition");
}

#[tokio::test]
async fn acting_on_selected_jobs_with_none_ticked_is_refused_rather_than_taken_as_all() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    db.insert_all([JobRow::new("resize").state(RowState::Dead).count(2)])
        .await;
    client.get("/dead").await;
    for path in ["/dead/replay", "/dead/discard", "/jobs/cancel"] {
        let page = client
            .post(path, &[("selected", "true"), ("confirm", "yes")])
            .await;
        assert_eq!(page.status, StatusCode::BAD_REQUEST, "{path}");
        page.shows("No job is selected");
    }
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_queue WHERE state = 'dead'")
            .await,
        2
    );
}

#[tokio::test]
async fn replaying_every_parked_row_is_previewed_first() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    db.execute(
        "INSERT INTO jobs_outbox (topic, payload, state, attempts, parked_at, last_error)
         SELECT 'orders', '{}', 'parked', 5, now(), 'refused' FROM generate_series(1, 3)",
    )
    .await;
    client.get("/outbox").await.shows("Replay every parked row");
    let page = client.post("/outbox/replay", &[]).await;
    assert_eq!(page.status, StatusCode::OK);
    page.shows("Replay 3 parked row(s)");
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_outbox WHERE state = 'parked'")
            .await,
        3
    );
    let page = client.post("/outbox/replay", &[("confirm", "yes")]).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_outbox WHERE state = 'pending'")
            .await,
        3
    );
}
