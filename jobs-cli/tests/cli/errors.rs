//! Mistakes and outages give one clear line and exit code 2, never a stack trace.

use crate::support::{run, Db};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_is_one_line() {
    let line = run(
        &[
            "stats",
            "--database-url",
            "postgres://nobody@127.0.0.1:1/jobs",
        ],
        None,
    )
    .await
    .one_line_error();
    assert!(
        line.starts_with("jobs: cannot reach the database at 127.0.0.1:1/jobs: "),
        "{line}"
    );
    assert!(
        !line.contains("nobody"),
        "no credentials in messages: {line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_database_url_says_what_to_set() {
    let line = run(&["check"], None).await.one_line_error();
    assert_eq!(
        line,
        "jobs: no database: set DATABASE_URL or pass --database-url postgres://user@host/db"
    );
    let line = run(&["check"], Some("mysql://somewhere/db"))
        .await
        .one_line_error();
    assert!(line.starts_with("jobs: invalid database URL: "), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_arguments_are_one_line() {
    let cases: [(&[&str], &str); 6] = [
        (&["frobnicate"], "unrecognized subcommand 'frobnicate'"),
        (&[], "a command is needed"),
        (&["stats", "--wide"], "unexpected argument '--wide'"),
        (
            &["check", "--max-ready-age", "5 minutes"],
            "invalid value '5 minutes'",
        ),
        (
            &["dead", "replay"],
            "the following required arguments were not provided",
        ),
        (
            &["dead", "replay", "--all", "--kind", "x"],
            "cannot be used with",
        ),
    ];
    for (args, expected) in cases {
        let line = run(args, Some("postgres://nobody@127.0.0.1:1/jobs"))
            .await
            .one_line_error();
        assert!(line.contains(expected), "{args:?}: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_and_version_exit_zero() {
    let help = run(&["--help"], None).await.success();
    assert!(help.stdout.contains("Usage: jobs"), "{help:?}");
    for command in ["migrate", "stats", "dead", "prune", "check"] {
        assert!(help.stdout.contains(command), "{command} in {help:?}");
    }
    let version = run(&["--version"], None).await.success();
    assert!(version.stdout.starts_with("jobs "), "{version:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_show_of_a_missing_job_is_one_line() {
    let db = Db::migrated().await;
    let line = db.jobs(&["dead", "show", "42"]).await.one_line_error();
    assert_eq!(
        line,
        "jobs: no job 42: never enqueued, or already discarded or pruned"
    );
}
