//! A private, disposable PostgreSQL cluster: see [`ThrowawayCluster`].

use std::collections::hash_map::RandomState;
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::Mutex as StdMutex;
use std::time::{Duration, Instant};

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};
use tempfile::TempDir;
use tokio::sync::Mutex;

/// Superuser role created by `initdb`, and the admin database of the cluster.
const SUPERUSER: &str = "postgres";
/// OS user the server runs as when the current process is root.
const SERVER_OS_USER: &str = "postgres";
/// How long to wait for the server to accept connections after it was launched.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long to wait for a fast shutdown before escalating to an immediate one.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long to wait for an immediate shutdown (in `Drop` and as escalation).
const KILL_TIMEOUT: Duration = Duration::from_secs(10);
/// Interval between two readiness or exit checks.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Interval between two exit checks in blocking code (`Drop`).
const BLOCKING_POLL_INTERVAL: Duration = Duration::from_millis(10);
/// Time allowed for one connection attempt while waiting for readiness.
const CONNECT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// Ports tried by [`ThrowawayCluster::start`] when the chosen port was taken meanwhile.
const PORT_ATTEMPTS: usize = 5;
/// Lowest port picked for a cluster.
const FIRST_PORT: u16 = 15000;
/// Start of the ephemeral port range assumed where it cannot be read (Linux's default).
const DEFAULT_EPHEMERAL_START: u16 = 32768;
/// Lines of the server log quoted in errors.
const LOG_TAIL_LINES: usize = 30;
/// Longest socket directory usable for the unix socket (`sun_path` is 108 bytes).
const MAX_SOCKET_DIR_LEN: usize = 90;

/// Ports of the clusters of this process, so that a stopped cluster's port
/// is not handed to another one.
static RESERVED_PORTS: StdMutex<Vec<u16>> = StdMutex::new(Vec::new());

/// Shell script run as the watchdog of a cluster.
///
/// `$1` is the cluster's temporary directory, `$2` its data directory. The
/// script blocks reading its stdin, a pipe whose only writer is the owning
/// process. The pipe reaches end-of-file when the owner drops the cluster or
/// exits in any way (including `SIGKILL`), because the kernel closes the
/// owner's file descriptors. The script then shuts a still running server
/// down immediately (pid from `postmaster.pid`, checked to be a live
/// `postgres` process) and removes the directory.
const WATCHDOG_SCRIPT: &str = r#"# jobs_postgres::testing cluster watchdog
trap '' HUP INT
dir=$1
data=$2
while read -r _line; do :; done
alive() {
    kill -0 "$1" 2>/dev/null || return 1
    if [ -r "/proc/$1/stat" ]; then
        read -r stat < "/proc/$1/stat" || return 1
        comm=${stat#*(}
        comm=${comm%%)*}
        state=${stat##*) }
        state=${state%% *}
        [ "$state" != Z ] && [ "$state" != X ] || return 1
        case "$comm" in postgres*|postmaster*) ;; *) return 1 ;; esac
    fi
    return 0
}
pid=
if [ -r "$data/postmaster.pid" ]; then
    read -r pid < "$data/postmaster.pid" || pid=
fi
case "$pid" in ''|*[!0-9]*) pid= ;; esac
if [ -n "$pid" ] && alive "$pid"; then
    kill -QUIT "$pid" 2>/dev/null
    i=0
    while alive "$pid" && [ "$i" -lt 200 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    if alive "$pid"; then kill -KILL "$pid" 2>/dev/null; fi
fi
rm -rf "$dir"
"#;

/// Errors of [`ThrowawayCluster`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// `initdb` and `postgres` were not found.
    #[error(
        "PostgreSQL server binaries (initdb, postgres) not found in /usr/lib/postgresql/*/bin, \
         /usr/pgsql-*/bin, on PATH or in `pg_config --bindir`: install PostgreSQL 14 or newer \
         (e.g. `apt-get install postgresql`)"
    )]
    BinariesNotFound,
    /// The process runs as root, and there is no unprivileged OS user to run the server as.
    #[error(
        "running as root, but PostgreSQL refuses to run as root and there is no `{user}` OS user \
         to run it as (nor setpriv, runuser or su to switch to it): create the user \
         (`apt-get install postgresql` does) or run the tests as an unprivileged user"
    )]
    NoServerUser {
        /// The OS user that was looked for.
        user: String,
    },
    /// A file system or process operation failed.
    #[error("{action}: {source}")]
    Io {
        /// What was being done.
        action: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// `initdb` exited with an error.
    #[error("initdb failed ({status}): {stderr}")]
    InitdbFailed {
        /// Exit status of `initdb`.
        status: String,
        /// What `initdb` wrote to stderr.
        stderr: String,
    },
    /// The server exited during startup, or the port could not be used.
    #[error("PostgreSQL failed to start on port {port}: {reason}; server log tail:\n{log_tail}")]
    StartFailed {
        /// Port the server was started on.
        port: u16,
        /// What went wrong.
        reason: String,
        /// The last lines of the server log.
        log_tail: String,
    },
    /// The server did not become ready, or did not stop, in time.
    #[error(
        "PostgreSQL on port {port} did not {what} within {waited:?}; server log tail:\n{log_tail}"
    )]
    Timeout {
        /// Port of the server.
        port: u16,
        /// What was waited for ("accept connections", "stop").
        what: &'static str,
        /// How long was waited.
        waited: Duration,
        /// The last lines of the server log.
        log_tail: String,
    },
}

impl ClusterError {
    fn io(action: impl Into<String>, source: io::Error) -> Self {
        ClusterError::Io {
            action: action.into(),
            source,
        }
    }
}

/// A private PostgreSQL cluster in a temporary directory, for tests.
///
/// [`start`](Self::start) runs `initdb` (superuser `postgres`, trust
/// authentication, `C` locale, UTF-8) in a fresh temporary directory and
/// launches `postgres` on a free TCP port of 127.0.0.1 only, with its unix
/// socket inside the directory and durability turned off (`fsync=off`): data
/// does not survive an OS crash, which tests do not need.
///
/// When the current process is root, `initdb` and `postgres` run as the
/// `postgres` OS user (PostgreSQL refuses to run as root).
///
/// The server can be stopped and started again on the same port and data
/// directory ([`stop`](Self::stop), [`start_again`](Self::start_again)),
/// e.g. to test how clients behave while the database is unreachable.
///
/// Dropping the cluster shuts the server down immediately and removes the
/// directory. A watchdog process does the same if the owning process dies
/// without dropping it (it exits, panics or is killed with `SIGKILL`), so
/// neither the server nor its files outlive the process.
#[derive(Debug)]
pub struct ThrowawayCluster {
    port: u16,
    dir: PathBuf,
    data_dir: PathBuf,
    socket_dir: Option<PathBuf>,
    log_path: PathBuf,
    bindir: PathBuf,
    launcher: Launcher,
    server: Mutex<Option<Child>>,
    tempdir: Option<TempDir>,
    watchdog: Option<Watchdog>,
}

impl ThrowawayCluster {
    /// Creates a cluster in a new temporary directory and starts it.
    ///
    /// Returns once the server accepts connections. Takes about a second,
    /// most of it in `initdb`.
    pub async fn start() -> Result<Self, ClusterError> {
        let bindir = find_bindir().ok_or(ClusterError::BinariesNotFound)?;
        let tempdir = make_tempdir()?;
        let dir = tempdir.path().to_path_buf();
        let is_root = fs::metadata(&dir)
            .map_err(|e| ClusterError::io(format!("reading {}", dir.display()), e))?
            .uid()
            == 0;
        let launcher = if is_root {
            let launcher = Launcher::as_user(SERVER_OS_USER)?;
            if let Some((uid, gid)) = launcher.owner {
                std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).map_err(|e| {
                    ClusterError::io(format!("giving {} to {SERVER_OS_USER}", dir.display()), e)
                })?;
            }
            launcher
        } else {
            Launcher::current()
        };
        let data_dir = dir.join("data");
        let socket_dir = (dir.as_os_str().len() <= MAX_SOCKET_DIR_LEN
            && !dir
                .to_string_lossy()
                .contains(|c: char| c == ',' || c == '"' || c == '\\' || c.is_whitespace()))
        .then(|| dir.clone());
        let log_path = dir.join("server.log");
        let watchdog = Watchdog::spawn(&dir, &data_dir)?;

        // From here on, an early return drops `cluster`, which cleans up.
        let mut cluster = ThrowawayCluster {
            port: 0,
            dir,
            data_dir,
            socket_dir,
            log_path,
            bindir,
            launcher,
            server: Mutex::new(None),
            tempdir: Some(tempdir),
            watchdog: Some(watchdog),
        };
        cluster.initdb().await?;

        let mut attempt = 0;
        loop {
            attempt += 1;
            if cluster.port != 0 {
                release_port(cluster.port);
            }
            cluster.port = reserve_port()?;
            match cluster.launch().await {
                Ok(child) => {
                    *cluster.server.get_mut() = Some(child);
                    tracing::debug!(port = cluster.port, dir = %cluster.dir.display(), "throwaway PostgreSQL cluster started");
                    return Ok(cluster);
                }
                Err(LaunchError::PortInUse(_)) if attempt < PORT_ATTEMPTS => {
                    tracing::debug!(port = cluster.port, "port taken meanwhile, trying another");
                }
                Err(LaunchError::PortInUse(e) | LaunchError::Other(e)) => return Err(e),
            }
        }
    }

    /// URL of the admin database (`postgres`) as the superuser `postgres`,
    /// e.g. `postgres://postgres@127.0.0.1:41234/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{SUPERUSER}", self.port)
    }

    /// Connection options equivalent to [`url`](Self::url).
    pub fn connect_options(&self) -> PgConnectOptions {
        PgConnectOptions::new_without_pgpass()
            .host("127.0.0.1")
            .port(self.port)
            .username(SUPERUSER)
            .database(SUPERUSER)
    }

    /// TCP port the server listens on (on 127.0.0.1); it stays the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Temporary directory holding the data directory (`data/`), the server
    /// log (`server.log`) and the unix socket.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The last lines of the server log, for diagnostics (or why it could not be read).
    pub fn log_tail(&self) -> String {
        log_tail(&self.log_path, 0)
    }

    /// Whether the server process is running (it may still be starting up or shutting down).
    pub async fn is_running(&self) -> bool {
        let mut server = self.server.lock().await;
        match server.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(_) => {
                *server = None;
                false
            }
            None => false,
        }
    }

    /// Stops the server with a fast shutdown (clients are disconnected, no
    /// new connections are accepted). Returns once the server process has
    /// exited and the port is free. Does nothing if the server is not running.
    pub async fn stop(&self) -> Result<(), ClusterError> {
        let mut server = self.server.lock().await;
        let Some(child) = server.as_mut() else {
            return Ok(());
        };
        let pid = self.server_pid(child);
        let result = self.shut_down(child, pid).await;
        *server = None;
        result
    }

    /// Starts the server again after [`stop`](Self::stop), on the same port
    /// and data directory. Returns once it accepts connections. Does nothing
    /// if the server is already running.
    pub async fn start_again(&self) -> Result<(), ClusterError> {
        let mut server = self.server.lock().await;
        if let Some(child) = server.as_mut() {
            if matches!(child.try_wait(), Ok(None)) {
                return Ok(());
            }
        }
        *server = None;
        let child = self
            .launch()
            .await
            .map_err(|(LaunchError::PortInUse(e) | LaunchError::Other(e))| e)?;
        *server = Some(child);
        tracing::debug!(
            port = self.port,
            "throwaway PostgreSQL cluster started again"
        );
        Ok(())
    }

    /// Stops the server if it runs, then starts it again: see
    /// [`stop`](Self::stop) and [`start_again`](Self::start_again).
    pub async fn restart(&self) -> Result<(), ClusterError> {
        self.stop().await?;
        self.start_again().await
    }

    async fn initdb(&self) -> Result<(), ClusterError> {
        let mut command = self.launcher.command(&self.bindir.join("initdb"));
        command
            .arg("-D")
            .arg(&self.data_dir)
            .args(["-U", SUPERUSER, "--auth=trust", "--encoding=UTF8"])
            .args(["--locale=C", "--no-sync"])
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .process_group(0);
        let output = tokio::process::Command::from(command)
            .output()
            .await
            .map_err(|e| ClusterError::io("running initdb", e))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(ClusterError::InitdbFailed {
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            })
        }
    }

    /// Launches the server on `self.port` and waits until it accepts connections.
    async fn launch(&self) -> Result<Child, LaunchError> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| {
                LaunchError::Other(ClusterError::io(
                    format!("opening {}", self.log_path.display()),
                    e,
                ))
            })?;
        let log_start = log.metadata().map(|m| m.len()).unwrap_or(0);
        let log_err = log.try_clone().map_err(|e| {
            LaunchError::Other(ClusterError::io("duplicating the log file handle", e))
        })?;
        let socket_dir = self
            .socket_dir
            .as_deref()
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut command = self.launcher.command(&self.bindir.join("postgres"));
        command
            .arg("-D")
            .arg(&self.data_dir)
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!("unix_socket_directories={socket_dir}"))
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "max_connections=200"])
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .process_group(0);
        let mut child = command
            .spawn()
            .map_err(|e| LaunchError::Other(ClusterError::io("starting postgres", e)))?;

        match self.wait_ready(&mut child, log_start).await {
            Ok(()) => Ok(child),
            Err(error) => {
                let pid = self.server_pid(&child);
                if !exited(&mut child) {
                    let _ = send_signal(pid, "QUIT");
                    if !wait_exit(&mut child, KILL_TIMEOUT).await {
                        let _ = send_signal(pid, "KILL");
                        let _ = child.kill();
                        let _ = wait_exit(&mut child, KILL_TIMEOUT).await;
                    }
                }
                Err(error)
            }
        }
    }

    async fn wait_ready(&self, child: &mut Child, log_start: u64) -> Result<(), LaunchError> {
        let options = self.connect_options().disable_statement_logging();
        let started = Instant::now();
        loop {
            match child.try_wait() {
                Ok(None) => {}
                Ok(Some(status)) => {
                    let log_tail = log_tail(&self.log_path, log_start);
                    let error = ClusterError::StartFailed {
                        port: self.port,
                        reason: format!("the server exited with {status}"),
                        log_tail: log_tail.clone(),
                    };
                    return Err(if is_port_clash(&log_tail) {
                        LaunchError::PortInUse(error)
                    } else {
                        LaunchError::Other(error)
                    });
                }
                Err(e) => {
                    return Err(LaunchError::Other(ClusterError::io(
                        "checking the server process",
                        e,
                    )))
                }
            }
            if let Ok(Ok(connection)) = tokio::time::timeout(
                CONNECT_ATTEMPT_TIMEOUT,
                PgConnection::connect_with(&options),
            )
            .await
            {
                let _ = connection.close().await;
                return Ok(());
            }
            if started.elapsed() >= READY_TIMEOUT {
                return Err(LaunchError::Other(ClusterError::Timeout {
                    port: self.port,
                    what: "accept connections",
                    waited: READY_TIMEOUT,
                    log_tail: log_tail(&self.log_path, log_start),
                }));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Fast shutdown, escalating to immediate shutdown and then `SIGKILL`.
    async fn shut_down(&self, child: &mut Child, pid: u32) -> Result<(), ClusterError> {
        if exited(child) {
            return Ok(());
        }
        // A failure to signal means the process is gone or going: the waits tell.
        let _ = send_signal(pid, "INT");
        if wait_exit(child, STOP_TIMEOUT).await {
            return Ok(());
        }
        tracing::warn!(
            port = self.port,
            "fast shutdown timed out, shutting down immediately"
        );
        let _ = send_signal(pid, "QUIT");
        if wait_exit(child, KILL_TIMEOUT).await {
            return Ok(());
        }
        let _ = send_signal(pid, "KILL");
        let _ = child.kill();
        if wait_exit(child, KILL_TIMEOUT).await {
            Ok(())
        } else {
            Err(ClusterError::Timeout {
                port: self.port,
                what: "stop",
                waited: STOP_TIMEOUT + 2 * KILL_TIMEOUT,
                log_tail: self.log_tail(),
            })
        }
    }

    /// Pid of the postmaster: the child itself unless a wrapper forked it.
    fn server_pid(&self, child: &Child) -> u32 {
        if self.launcher.execs {
            child.id()
        } else {
            postmaster_pid(&self.data_dir).unwrap_or_else(|| child.id())
        }
    }
}

impl Drop for ThrowawayCluster {
    fn drop(&mut self) {
        if let Some(mut child) = self.server.get_mut().take() {
            if !exited(&mut child) {
                let pid = self.server_pid(&child);
                if let Err(error) = send_signal(pid, "QUIT") {
                    tracing::warn!(%error, "could not stop the throwaway PostgreSQL server");
                }
                if wait_exit_blocking(&mut child, KILL_TIMEOUT).is_none() {
                    let _ = send_signal(pid, "KILL");
                    let _ = child.kill();
                    let _ = wait_exit_blocking(&mut child, KILL_TIMEOUT);
                }
            }
        }
        if let Some(tempdir) = self.tempdir.take() {
            if let Err(error) = tempdir.close() {
                tracing::warn!(%error, dir = %self.dir.display(), "could not remove the throwaway cluster directory");
            }
        }
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.release();
        }
        if self.port != 0 {
            release_port(self.port);
        }
    }
}

/// Failure of one launch attempt.
enum LaunchError {
    /// The port was taken by another process: worth retrying on another port.
    PortInUse(ClusterError),
    /// Anything else.
    Other(ClusterError),
}

/// The watchdog process of a cluster: see [`WATCHDOG_SCRIPT`].
#[derive(Debug)]
struct Watchdog {
    child: Child,
    /// Write end of the watchdog's stdin; closing it triggers the cleanup.
    stdin: Option<ChildStdin>,
}

impl Watchdog {
    fn spawn(dir: &Path, data_dir: &Path) -> Result<Self, ClusterError> {
        let mut child = Command::new("/bin/sh")
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg("jobs-pg-watchdog")
            .arg(dir)
            .arg(data_dir)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| ClusterError::io("starting the watchdog (/bin/sh)", e))?;
        let stdin = child.stdin.take();
        Ok(Watchdog { child, stdin })
    }

    /// Lets the watchdog run its (by now redundant) cleanup and exit; reaps it.
    fn release(mut self) {
        drop(self.stdin.take());
        if wait_exit_blocking(&mut self.child, KILL_TIMEOUT).is_none() {
            tracing::warn!("the throwaway cluster watchdog did not exit");
        }
    }
}

/// How `initdb` and `postgres` are launched: directly, or as another OS user.
#[derive(Debug, Clone)]
struct Launcher {
    /// Program and arguments put in front of the server command.
    prefix: Vec<OsString>,
    /// Whether the prefix execs the command (same pid) rather than forking it.
    execs: bool,
    /// Uid and gid of the OS user the server runs as, when switching users.
    owner: Option<(u32, u32)>,
}

impl Launcher {
    fn current() -> Self {
        Launcher {
            prefix: Vec::new(),
            execs: true,
            owner: None,
        }
    }

    fn as_user(user: &str) -> Result<Self, ClusterError> {
        let no_user = || ClusterError::NoServerUser {
            user: user.to_owned(),
        };
        let uid = id_of(user, "-u").ok_or_else(no_user)?;
        let gid = id_of(user, "-g").ok_or_else(no_user)?;
        let owner = Some((uid, gid));
        if let Some(setpriv) = find_program("setpriv") {
            return Ok(Launcher {
                prefix: vec![
                    setpriv.into(),
                    format!("--reuid={uid}").into(),
                    format!("--regid={gid}").into(),
                    "--init-groups".into(),
                    "--".into(),
                ],
                execs: true,
                owner,
            });
        }
        if let Some(runuser) = find_program("runuser") {
            return Ok(Launcher {
                prefix: vec![runuser.into(), "-u".into(), user.into(), "--".into()],
                execs: false,
                owner,
            });
        }
        if let Some(su) = find_program("su") {
            return Ok(Launcher {
                prefix: vec![
                    su.into(),
                    "-s".into(),
                    "/bin/sh".into(),
                    "-c".into(),
                    r#"exec "$0" "$@""#.into(),
                    user.into(),
                ],
                execs: false,
                owner,
            });
        }
        Err(no_user())
    }

    fn command(&self, program: &Path) -> Command {
        match self.prefix.split_first() {
            None => Command::new(program),
            Some((first, rest)) => {
                let mut command = Command::new(first);
                command.args(rest).arg(program);
                command
            }
        }
    }
}

/// Numeric uid (`flag` = `-u`) or gid (`-g`) of an OS user.
fn id_of(user: &str, flag: &str) -> Option<u32> {
    let output = Command::new("id")
        .arg(flag)
        .arg(user)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    String::from_utf8_lossy(&output.stdout).trim().parse().ok()
}

/// Directory holding `initdb` and `postgres`: the highest version under
/// `/usr/lib/postgresql/*/bin` (Debian, Ubuntu) or `/usr/pgsql-*/bin` (RHEL),
/// else the one of `initdb` on `PATH`, else `pg_config --bindir`, else
/// `/usr/local/pgsql/bin`.
pub(crate) fn find_bindir() -> Option<PathBuf> {
    let has_server = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();

    let mut versioned: Vec<(Vec<u32>, PathBuf)> = Vec::new();
    for (root, prefix, suffix) in [
        ("/usr/lib/postgresql", "", "bin"),
        ("/usr", "pgsql-", "bin"),
    ] {
        let Ok(entries) = fs::read_dir(root) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(version) = name.strip_prefix(prefix).and_then(parse_version) else {
                continue;
            };
            let bindir = entry.path().join(suffix);
            if has_server(&bindir) {
                versioned.push((version, bindir));
            }
        }
    }
    if let Some((_, bindir)) = versioned.into_iter().max_by(|a, b| a.0.cmp(&b.0)) {
        return Some(bindir);
    }

    if let Some(initdb) = find_in_path("initdb") {
        if let Some(dir) = fs::canonicalize(&initdb)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
        {
            if has_server(&dir) {
                return Some(dir);
            }
        }
        if let Some(dir) = initdb.parent() {
            if has_server(dir) {
                return Some(dir.to_path_buf());
            }
        }
    }

    if let Ok(output) = Command::new("pg_config")
        .arg("--bindir")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
    {
        if output.status.success() {
            let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
            if has_server(&dir) {
                return Some(dir);
            }
        }
    }

    let dir = Path::new("/usr/local/pgsql/bin");
    has_server(dir).then(|| dir.to_path_buf())
}

/// `"15"` → `[15]`, `"9.6"` → `[9, 6]`; `None` if not a version.
fn parse_version(name: &str) -> Option<Vec<u32>> {
    name.split('.').map(|part| part.parse().ok()).collect()
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// A program on `PATH` or in the usual system directories.
fn find_program(name: &str) -> Option<PathBuf> {
    find_in_path(name).or_else(|| {
        ["/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"]
            .iter()
            .map(|dir| Path::new(dir).join(name))
            .find(|candidate| candidate.is_file())
    })
}

/// A new temporary directory that the server's OS user can reach.
fn make_tempdir() -> Result<TempDir, ClusterError> {
    let base = std::env::temp_dir();
    let create = |base: &Path| {
        tempfile::Builder::new()
            .prefix("jobs-pg-")
            .tempdir_in(base)
            .map_err(|e| ClusterError::io(format!("creating a directory in {}", base.display()), e))
    };
    let tempdir = create(&base)?;
    let is_root = fs::metadata(tempdir.path())
        .map(|m| m.uid() == 0)
        .unwrap_or(false);
    // As root the server runs as another user, who must be able to traverse
    // every ancestor of the directory ($TMPDIR may be e.g. under /root).
    if is_root && !others_can_traverse(&base) && Path::new("/tmp") != base {
        return create(Path::new("/tmp"));
    }
    Ok(tempdir)
}

fn others_can_traverse(dir: &Path) -> bool {
    let Ok(dir) = fs::canonicalize(dir) else {
        return false;
    };
    dir.ancestors().all(|ancestor| {
        fs::metadata(ancestor)
            .map(|m| m.permissions().mode() & 0o001 != 0)
            .unwrap_or(false)
    })
}

/// A TCP port of 127.0.0.1 that was free a moment ago, reserved in this
/// process until [`release_port`].
///
/// It is taken below the kernel's ephemeral port range when possible: while
/// the server is stopped, a client retrying to connect gets an ephemeral
/// source port, which could otherwise be the server's port (a TCP
/// self-connection, or just a socket holding it) and make the restart fail.
fn reserve_port() -> Result<u16, ClusterError> {
    let low = ephemeral_port_range_start().unwrap_or(DEFAULT_EPHEMERAL_START);
    let mut reserved = RESERVED_PORTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if low > FIRST_PORT + 1000 {
        let span = u64::from(low - FIRST_PORT);
        let state = RandomState::new();
        for attempt in 0..200_u64 {
            let mut hasher = state.build_hasher();
            hasher.write_u64(attempt);
            hasher.write_u32(std::process::id());
            let offset = u16::try_from(hasher.finish() % span).unwrap_or(0);
            let port = FIRST_PORT + offset;
            if !reserved.contains(&port) && TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
                reserved.push(port);
                return Ok(port);
            }
        }
    }
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| ClusterError::io("finding a free TCP port", e))?;
    reserved.push(port);
    Ok(port)
}

/// Makes a port from [`reserve_port`] available again.
fn release_port(port: u16) {
    let mut reserved = RESERVED_PORTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    reserved.retain(|&p| p != port);
}

/// First port of the kernel's ephemeral range (Linux), e.g. 32768.
fn ephemeral_port_range_start() -> Option<u16> {
    fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn is_port_clash(log: &str) -> bool {
    log.contains("Address already in use") || log.contains("could not bind IPv4 address")
}

/// Pid of the running postmaster, from the first line of `postmaster.pid`.
fn postmaster_pid(data_dir: &Path) -> Option<u32> {
    let contents = fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    contents.lines().next()?.trim().parse().ok()
}

/// Sends `signal` (e.g. `"INT"`) with the shell's `kill`, which works across
/// users when root (the server may run as another user).
fn send_signal(pid: u32, signal: &str) -> Result<(), ClusterError> {
    let status = Command::new("/bin/sh")
        .args(["-c", r#"kill -s "$0" "$1" 2>/dev/null"#, signal])
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| ClusterError::io(format!("sending SIG{signal} to {pid}"), e))?;
    if status.success() {
        Ok(())
    } else {
        Err(ClusterError::io(
            format!("sending SIG{signal} to {pid}"),
            io::Error::other("kill failed (no such process?)"),
        ))
    }
}

/// Whether the child exited (an error checking counts as exited: it is gone for us).
fn exited(child: &mut Child) -> bool {
    !matches!(child.try_wait(), Ok(None))
}

/// Polls until the child exits; `false` on timeout.
async fn wait_exit(child: &mut Child, timeout: Duration) -> bool {
    let started = Instant::now();
    loop {
        if exited(child) {
            return true;
        }
        if started.elapsed() >= timeout {
            return false;
        }
        tokio::time::sleep(BLOCKING_POLL_INTERVAL).await;
    }
}

/// Blocking variant of [`wait_exit`] for `Drop`; `None` on timeout.
fn wait_exit_blocking(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(_) => return None,
        }
        if started.elapsed() >= timeout {
            return None;
        }
        std::thread::sleep(BLOCKING_POLL_INTERVAL);
    }
}

/// The last [`LOG_TAIL_LINES`] lines of the log written after byte `from`.
fn log_tail(path: &Path, from: u64) -> String {
    let mut text = String::new();
    let read = File::open(path).and_then(|mut file| {
        file.seek(SeekFrom::Start(from))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        text = String::from_utf8_lossy(&bytes).into_owned();
        Ok(())
    });
    if let Err(error) = read {
        return format!("(could not read {}: {error})", path.display());
    }
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions() {
        assert_eq!(parse_version("15"), Some(vec![15]));
        assert_eq!(parse_version("9.6"), Some(vec![9, 6]));
        assert_eq!(parse_version("main"), None);
        assert!(parse_version("16").unwrap() > parse_version("9.6").unwrap());
    }

    #[test]
    fn reserves_distinct_ports_below_the_ephemeral_range() {
        let ports: Vec<u16> = (0..20).map(|_| reserve_port().expect("port")).collect();
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len());
        let low = ephemeral_port_range_start().unwrap_or(DEFAULT_EPHEMERAL_START);
        assert!(
            ports.iter().all(|&p| (FIRST_PORT..low).contains(&p)),
            "{ports:?}"
        );
        for port in ports {
            release_port(port);
        }
    }

    #[test]
    fn detects_port_clashes() {
        assert!(is_port_clash(
            "LOG:  could not bind IPv4 address \"127.0.0.1\": Address already in use"
        ));
        assert!(!is_port_clash("FATAL:  data directory has wrong ownership"));
    }
}
