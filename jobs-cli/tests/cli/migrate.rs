//! `jobs migrate`.

use jobs_postgres::migrate::MIGRATIONS;

use crate::support::Db;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_applies_the_schema_once() {
    let db = Db::empty().await;
    let versions: Vec<String> = MIGRATIONS
        .iter()
        .map(|migration| migration.version.to_string())
        .collect();
    let first = db.jobs(&["migrate"]).await.success();
    assert_eq!(
        first.stdout,
        format!("applied jobs migrations {}\n", versions.join(", "))
    );
    let second = db.jobs(&["migrate"]).await.success();
    assert_eq!(second.stdout, "the jobs schema is up to date\n");
    assert_eq!(
        db.count("SELECT count(*) FROM jobs_migrations").await,
        i64::try_from(MIGRATIONS.len()).unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_on_an_unmigrated_database_say_to_migrate() {
    let db = Db::empty().await;
    let line = db.jobs(&["stats"]).await.one_line_error();
    assert_eq!(
        line,
        "jobs: the jobs schema is missing in this database: run `jobs migrate` (or `jobs::migrate`) first"
    );
}
