//! Running the built `jobs` binary against a fresh database.

use std::process::Stdio;
use std::time::Duration;

use jobs_testkit::{JobRow, RowState};

/// The binary under test.
pub const JOBS: &str = env!("CARGO_BIN_EXE_jobs");

jobs_testkit::suite_db! {
    /// The test kit's fresh database (dropped at the end of the test), with the binary to run
    /// against it.
    Db
}

impl Db {
    /// A database with the jobs schema.
    pub async fn migrated() -> Self {
        jobs_testkit::Db::migrated().await.into()
    }

    /// A database without the jobs schema.
    pub async fn empty() -> Self {
        jobs_testkit::Db::empty().await.into()
    }

    /// Runs `jobs ARGS` with `DATABASE_URL` naming this database.
    pub async fn jobs(&self, args: &[&str]) -> Run {
        run(args, Some(self.url())).await
    }

    /// Inserts `count` jobs of `kind` in `queue` and `state`, with one attempt allowed; a dead
    /// job keeps one permanent error. Returns their ids.
    pub async fn insert(&self, count: i64, kind: &str, queue: &str, state: &str) -> Vec<i64> {
        let state = match state {
            "ready" => RowState::Ready,
            "running" => RowState::Running,
            "dead" => RowState::Dead,
            "done" => RowState::Done,
            "cancelled" => RowState::Cancelled,
            other => panic!("no such state: {other}"),
        };
        let mut rows = JobRow::new(kind)
            .queue(queue)
            .state(state)
            .count(count)
            .max_attempts(1);
        if state == RowState::Dead {
            rows = rows.errors(serde_json::json!([{
                "attempt": 1,
                "at": chrono::Utc::now().to_rfc3339(),
                "kind": "permanent",
                "error": "no such user",
            }]));
        }
        rows.insert(&self.pool).await
    }
}

/// What a run of the binary printed, and how it exited.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Asserts a clean success with nothing on stderr (progress stays quiet off a terminal).
    pub fn success(self) -> Self {
        assert_eq!(self.code, 0, "{self:?}");
        assert_eq!(self.stderr, "", "{self:?}");
        self
    }

    /// Asserts the run failed with exit code 2 and one line on stderr; returns that line.
    pub fn one_line_error(self) -> String {
        assert_eq!(self.code, 2, "{self:?}");
        assert_eq!(self.stdout, "", "{self:?}");
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line on stderr: {self:?}");
        assert!(lines[0].starts_with("jobs: "), "{self:?}");
        assert!(!self.stderr.contains("panicked"), "{self:?}");
        lines[0].to_string()
    }
}

/// Runs `jobs ARGS`, with `DATABASE_URL` set to `database_url` or unset.
pub async fn run(args: &[&str], database_url: Option<&str>) -> Run {
    let mut command = tokio::process::Command::new(JOBS);
    command
        .args(args)
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(url) = database_url {
        command.env("DATABASE_URL", url);
    }
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("jobs finishes within 60 s")
        .expect("jobs runs");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

pub use jobs_testkit::wait_until;
