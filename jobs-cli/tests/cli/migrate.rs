//! `jobs migrate`.

use crate::support::Db;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_applies_the_schema_once() {
    let db = Db::empty().await;
    let first = db.jobs(&["migrate"]).await.success();
    assert_eq!(first.stdout, "applied jobs migrations 1, 2\n");
    let second = db.jobs(&["migrate"]).await.success();
    assert_eq!(second.stdout, "the jobs schema is up to date\n");
    assert_eq!(db.count("SELECT count(*) FROM jobs_migrations").await, 2);
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
