//! pgbench, PostgreSQL's own load driver, running the raw statements: the check on the Rust raw
//! loops. A ceiling is only worth the name when no client runs the same statements faster, so
//! each raw workload that pgbench can express also runs through it (`-M prepared`, the same
//! number of clients), in the same run, and the report prints both.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A pgbench found on this machine.
#[derive(Debug, Clone)]
pub struct Pgbench {
    program: PathBuf,
}

/// What a pgbench run reports.
#[derive(Debug, Clone, Copy)]
pub struct PgbenchRun {
    /// Transactions (script runs) it completed.
    pub transactions: u64,
    /// Seconds they took, without the clients' connection time.
    pub seconds: f64,
}

/// Why a pgbench run gave no figure.
#[derive(Debug)]
pub enum PgbenchError {
    /// The script could not be written, or pgbench not started.
    Io(std::io::Error),
    /// pgbench ended with an error.
    Failed { status: String, stderr: String },
    /// Its output lacked a figure this module reads.
    Unreadable {
        missing: &'static str,
        stdout: String,
    },
}

impl std::fmt::Display for PgbenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(error) => write!(f, "pgbench could not run: {error}"),
            Self::Failed { status, stderr } => write!(f, "pgbench failed ({status}): {stderr}"),
            Self::Unreadable { missing, stdout } => {
                write!(f, "pgbench printed no `{missing}`: {stdout}")
            }
        }
    }
}

impl std::error::Error for PgbenchError {}

impl From<std::io::Error> for PgbenchError {
    fn from(error: std::io::Error) -> Self {
        Self::Io(error)
    }
}

impl Pgbench {
    /// The pgbench of `PGBENCH` when set, else the one on `PATH`, else the newest in Debian's
    /// `/usr/lib/postgresql/<version>/bin`; `None` when there is none.
    pub fn find() -> Option<Self> {
        if let Some(program) = std::env::var_os("PGBENCH") {
            return Some(Self {
                program: program.into(),
            });
        }
        let on_path = std::env::var_os("PATH").into_iter().flat_map(|path| {
            std::env::split_paths(&path)
                .map(|directory| directory.join("pgbench"))
                .collect::<Vec<_>>()
        });
        let mut debian: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .map(|version| version.path().join("bin/pgbench"))
            .collect();
        // Newest version first: `15` before `14`, `16` before `15`.
        debian.sort_by_key(|path| {
            std::cmp::Reverse(
                path.parent()
                    .and_then(Path::parent)
                    .and_then(Path::file_name)
                    .and_then(|name| name.to_str())
                    .and_then(|name| name.parse::<u32>().ok()),
            )
        });
        on_path
            .chain(debian)
            .find(|program| program.is_file())
            .map(|program| Self { program })
    }

    /// Where it is.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Runs `script` (a pgbench script) on the database at `url` with `clients` clients, each
    /// running it `transactions` times, with `-M prepared` (every statement prepared once per
    /// connection, as sqlx does) and the variables `variables` (`-D name=value`).
    pub async fn run(
        &self,
        url: &str,
        script: &str,
        clients: usize,
        transactions: usize,
        variables: &[(&str, String)],
    ) -> Result<PgbenchRun, PgbenchError> {
        static SCRIPTS: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "jobs-bench-{}-{}.sql",
            std::process::id(),
            SCRIPTS.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, script)?;
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .min(clients);
        let mut command = Command::new(&self.program);
        command
            .args(["--no-vacuum", "--protocol=prepared"])
            .arg(format!("--client={clients}"))
            .arg(format!("--jobs={threads}"))
            .arg(format!("--transactions={transactions}"))
            .arg(format!("--file={}", path.display()));
        for (name, value) in variables {
            command.arg(format!("--define={name}={value}"));
        }
        command.arg(url);
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .map_err(|error| PgbenchError::Io(std::io::Error::other(error)))?;
        let _ = std::fs::remove_file(&path);
        let output = output?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if !output.status.success() {
            return Err(PgbenchError::Failed {
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        let transactions: u64 = figure(&stdout, "number of transactions actually processed:")
            .and_then(|value| value.split('/').next()?.parse().ok())
            .ok_or_else(|| PgbenchError::Unreadable {
                missing: "number of transactions actually processed",
                stdout: stdout.clone(),
            })?;
        let tps: f64 = figure(&stdout, "tps =")
            .and_then(|value| value.parse().ok())
            .ok_or_else(|| PgbenchError::Unreadable {
                missing: "tps",
                stdout: stdout.clone(),
            })?;
        Ok(PgbenchRun {
            transactions,
            seconds: transactions as f64 / tps,
        })
    }
}

/// The first word after `label` on the line of pgbench's output that starts with it.
fn figure<'a>(stdout: &'a str, label: &str) -> Option<&'a str> {
    stdout
        .lines()
        .find_map(|line| line.trim().strip_prefix(label))?
        .split_whitespace()
        .next()
}

/// `statement` (written for sqlx, with parameters `$1`, `$2`, ...) as a pgbench command: each
/// `$n` becomes the variable `:names[n - 1]`, which pgbench's prepared mode sends as the same
/// parameter. Panics when the statement has more parameters than names.
pub fn command(statement: &str, names: &[&str]) -> String {
    let mut text = statement.to_string();
    // From the last, so that `$1` does not match the start of `$10`.
    for (index, name) in names.iter().enumerate().rev() {
        text = text.replace(&format!("${}", index + 1), &format!(":{name}"));
    }
    assert!(
        !text.contains('$'),
        "more parameters than names in {statement}"
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_become_variables() {
        assert_eq!(
            command("SELECT $1, $2, $1", &["a", "b"]),
            "SELECT :a, :b, :a"
        );
    }

    #[test]
    fn figures_are_read_from_pgbench_output() {
        let stdout = "number of transactions actually processed: 4000/4000\n\
                      latency average = 1.2 ms\n\
                      tps = 812.5 (without initial connection time)\n";
        assert_eq!(
            figure(stdout, "number of transactions actually processed:"),
            Some("4000/4000")
        );
        assert_eq!(figure(stdout, "tps ="), Some("812.5"));
    }
}
