//! Who may look and who may act.

use axum::http::StatusCode;
use jobs::admin;
use jobs_console::{AccessToken, ConsoleConfig};

use crate::console;

const TOKEN: &str = "correct-horse-battery-staple";

#[tokio::test]
async fn without_a_token_only_requests_addressed_to_loopback_are_answered() {
    let (_db, mut client) = console(ConsoleConfig::new()).await;
    for host in ["127.0.0.1:8080", "localhost:8080", "[::1]:8080"] {
        client.host = host.to_owned();
        assert_eq!(client.get("/").await.status, StatusCode::OK, "{host}");
    }
    client.host = "rebound.example:8080".to_owned();
    let page = client.get("/").await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);
    page.shows("answers only requests addressed to localhost");
}

#[tokio::test]
async fn a_change_without_the_csrf_token_is_refused_and_changes_nothing() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    client.get("/").await;
    let page = client
        .post_exactly("/queues/pause", &[("queue", "emails")])
        .await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);
    page.shows("security token is missing or stale");
    let page = client
        .post_exactly(
            "/queues/pause",
            &[("queue", "emails"), ("csrf", &"0".repeat(64))],
        )
        .await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);
    assert!(admin::paused_queues(&db.pool).await.unwrap().is_empty());

    let page = client.post("/queues/pause", &[("queue", "emails")]).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    assert_eq!(admin::paused_queues(&db.pool).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_change_sent_from_another_site_is_refused() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    client.get("/").await;
    client.origin = Some("https://attacker.example".to_owned());
    let page = client.post("/queues/pause", &[("queue", "emails")]).await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);
    page.shows("sent from another site");
    assert!(admin::paused_queues(&db.pool).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_read_only_console_offers_no_control_and_refuses_every_change() {
    let (db, mut client) = console(ConsoleConfig::new().read_only(true)).await;
    jobs_testkit::JobRow::new("send_receipt")
        .queue("emails")
        .insert(&db.pool)
        .await;
    let page = client.get("/").await;
    page.shows("read-only").shows("emails").hides("Pause");
    let page = client.post("/queues/pause", &[("queue", "emails")]).await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);
    page.shows("read-only");
    assert!(admin::paused_queues(&db.pool).await.unwrap().is_empty());
}

#[tokio::test]
async fn with_a_token_visitors_sign_in_once_and_their_name_is_recorded() {
    let token = AccessToken::new(TOKEN).unwrap();
    let (db, mut client) = console(ConsoleConfig::new().access_token(token)).await;
    client.host = "console.internal:8080".to_owned();

    let page = client.get("/dead?kind=x").await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(
        page.location.as_deref(),
        Some("/login?next=/dead%3Fkind%3Dx")
    );
    let page = client
        .post_exactly("/queues/pause", &[("queue", "emails")])
        .await;
    assert_eq!(page.status, StatusCode::UNAUTHORIZED);

    client.get("/login").await.shows("Access token");
    let page = client
        .post_exactly(
            "/login",
            &[("token", "wrong-token-wrong-token"), ("name", "ana")],
        )
        .await;
    assert_eq!(page.status, StatusCode::UNAUTHORIZED);
    page.shows("not this console's access token");

    let page = client
        .post_exactly(
            "/login",
            &[("token", TOKEN), ("name", "ana"), ("next", "/dead?kind=x")],
        )
        .await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(page.location.as_deref(), Some("/dead?kind=x"));
    client.get("/").await.shows("ana").shows("Sign out");
    let page = client
        .post(
            "/queues/pause",
            &[("queue", "emails"), ("reason", "provider down")],
        )
        .await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    let pauses = admin::paused_queues(&db.pool).await.unwrap();
    assert_eq!(pauses[0].paused_by, "ana");

    let page = client.post("/logout", &[]).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(client.get("/").await.status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn a_sign_in_never_sends_the_visitor_to_another_site() {
    let token = AccessToken::new(TOKEN).unwrap();
    let (_db, mut client) = console(ConsoleConfig::new().access_token(token)).await;
    for next in [
        "https://attacker.example/",
        "//attacker.example/",
        "/\\attacker.example",
        "/\t/attacker.example",
        "dead",
    ] {
        let page = client
            .post_exactly(
                "/login",
                &[("token", TOKEN), ("name", "ana"), ("next", next)],
            )
            .await;
        assert_eq!(page.location.as_deref(), Some("/"), "{next}");
    }
}

#[tokio::test]
async fn tools_may_send_the_token_as_a_bearer_header() {
    let token = AccessToken::new(TOKEN).unwrap();
    let (db, mut client) = console(ConsoleConfig::new().access_token(token)).await;
    client.bearer = Some(TOKEN.to_owned());
    assert_eq!(client.get("/").await.status, StatusCode::OK);
    let page = client
        .post_exactly("/queues/pause", &[("queue", "emails")])
        .await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(admin::paused_queues(&db.pool).await.unwrap().len(), 1);

    client.bearer = Some("not-the-token-not-the-token".to_owned());
    assert_eq!(client.get("/").await.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn every_page_forbids_framing_and_scripts() {
    let (_db, mut client) = console(ConsoleConfig::new()).await;
    let page = client.get("/").await;
    let policy = page.headers["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("default-src 'none'"), "{policy}");
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
    assert_eq!(page.headers["x-frame-options"], "DENY");
    let cookie = page.headers["set-cookie"].to_str().unwrap();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
}

#[tokio::test]
async fn a_host_name_allowed_without_a_token_may_look_but_not_act() {
    let (db, mut client) = console(ConsoleConfig::new().allow_host("ops.internal")).await;
    client.host = "ops.internal".to_owned();
    assert_eq!(client.get("/").await.status, StatusCode::OK);
    let page = client.post("/queues/pause", &[("queue", "emails")]).await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);
    page.shows("may only look");
    assert!(admin::paused_queues(&db.pool).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_read_only_console_still_lets_visitors_sign_out() {
    let token = AccessToken::new(TOKEN).unwrap();
    let (_db, mut client) = console(ConsoleConfig::new().access_token(token).read_only(true)).await;
    client
        .post_exactly("/login", &[("token", TOKEN), ("name", "ana")])
        .await;
    client.get("/").await.shows("Sign out");
    let page = client.post("/logout", &[]).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    assert_eq!(client.get("/").await.status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn a_nested_console_sends_visitors_back_inside_it_after_sign_in() {
    let token = AccessToken::new(TOKEN).unwrap();
    let (db, _) = console(ConsoleConfig::new()).await;
    let app = axum::Router::new().nest(
        "/ops/jobs",
        jobs_console::router(
            db.pool.clone(),
            ConsoleConfig::new()
                .base_path("/ops/jobs")
                .access_token(token),
        ),
    );
    let mut client = crate::client::Client::new(app);
    let page = client.get("/ops/jobs/dead?kind=x").await;
    assert_eq!(
        page.location.as_deref(),
        Some("/ops/jobs/login?next=/ops/jobs/dead%3Fkind%3Dx")
    );
    let page = client
        .post_exactly(
            "/ops/jobs/login",
            &[
                ("token", TOKEN),
                ("name", "ana"),
                ("next", "/ops/jobs/dead?kind=x"),
            ],
        )
        .await;
    assert_eq!(page.location.as_deref(), Some("/ops/jobs/dead?kind=x"));
    let page = client
        .post_exactly("/ops/jobs/login", &[("token", TOKEN), ("name", "ana")])
        .await;
    assert_eq!(page.location.as_deref(), Some("/ops/jobs"));
    let overview = client.get("/ops/jobs").await;
    assert_eq!(overview.status, StatusCode::OK, "{}", overview.body);
    overview.shows(r#"<a class="brand" href="/ops/jobs">"#);
    let page = client
        .post("/ops/jobs/queues/pause", &[("queue", "emails")])
        .await;
    assert_eq!(
        page.location.as_deref(),
        Some("/ops/jobs?done=Paused%20queue%20emails")
    );
}
