//! Pages that say what is wrong and what to do.

use std::time::Duration;

use axum::http::StatusCode;
use jobs_console::{router, ConsoleConfig};
use jobs_testkit::Db;
use sqlx::postgres::PgPoolOptions;

use crate::client::Client;
use crate::console;

#[tokio::test]
async fn a_database_without_the_schema_says_to_migrate() {
    let db = Db::empty().await;
    let mut client = Client::new(router(db.pool.clone(), ConsoleConfig::new()));
    let page = client.get("/").await;
    assert_eq!(page.status, StatusCode::SERVICE_UNAVAILABLE);
    page.shows("The jobs schema is missing")
        .shows("jobs migrate");

    jobs::migrate(&db.pool).await.unwrap();
    assert_eq!(client.get("/").await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_schema_behind_or_newer_than_the_console_says_which_to_upgrade() {
    let (db, mut client) = console(ConsoleConfig::new()).await;
    let latest = jobs_postgres::migrate::MIGRATIONS.last().unwrap().version;
    db.execute(&format!(
        "DELETE FROM jobs_migrations WHERE version = {latest}"
    ))
    .await;
    let page = client.get("/").await;
    assert_eq!(page.status, StatusCode::SERVICE_UNAVAILABLE);
    page.shows("behind this console").shows("jobs migrate");

    let (db, mut client) = console(ConsoleConfig::new()).await;
    db.execute(
        "INSERT INTO jobs_migrations (version, name, checksum) VALUES (9999, 'future', 'x')",
    )
    .await;
    let page = client.get("/").await;
    assert_eq!(page.status, StatusCode::SERVICE_UNAVAILABLE);
    page.shows("newer than this console")
        .shows("Upgrade the console");
}

#[tokio::test]
async fn an_unreachable_database_says_so() {
    let pool = PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(2))
        .connect_lazy("postgres://root@127.0.0.1:1/nothing")
        .unwrap();
    let mut client = Client::new(router(pool, ConsoleConfig::new()));
    let page = client.get("/").await;
    assert_eq!(page.status, StatusCode::SERVICE_UNAVAILABLE);
    page.shows("The database cannot be reached")
        .shows("DATABASE_URL");
}

#[tokio::test]
async fn unknown_pages_and_jobs_are_not_found() {
    let (_db, mut client) = console(ConsoleConfig::new()).await;
    assert_eq!(client.get("/nowhere").await.status, StatusCode::NOT_FOUND);
    let page = client.get("/jobs/424242").await;
    assert_eq!(page.status, StatusCode::NOT_FOUND);
    page.shows("There is no job 424242");
    assert_eq!(
        client.get("/jobs/abc").await.status,
        StatusCode::BAD_REQUEST
    );
}
