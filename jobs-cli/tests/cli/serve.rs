//! `jobs serve`: refuses to expose an unprotected console, serves one until SIGTERM.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::support::{Db, JOBS};

const TOKEN: &str = "correct-horse-battery-staple";

#[tokio::test]
async fn an_address_other_hosts_can_reach_needs_a_token_or_read_only() {
    let db = Db::migrated().await;
    let error = db
        .jobs(&["serve", "--listen", "0.0.0.0:0"])
        .await
        .one_line_error();
    assert!(error.contains("not serving on 0.0.0.0:0"), "{error}");
    assert!(error.contains("needs an access token"), "{error}");
}

#[tokio::test]
async fn a_short_token_is_refused() {
    let db = Db::migrated().await;
    let file = std::env::temp_dir().join(format!("jobs-console-token-{}", std::process::id()));
    std::fs::write(&file, "short\n").unwrap();
    let error = db
        .jobs(&["serve", "--token-file", file.to_str().unwrap()])
        .await
        .one_line_error();
    std::fs::remove_file(&file).unwrap();
    assert!(error.contains("needs at least 16"), "{error}");
}

/// The `host:port` in the first line `jobs serve` prints.
fn address_in(first: &str) -> String {
    first
        .trim_start_matches("jobs console on http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned()
}

/// Starts `jobs serve ARGS` with `token` in the environment; returns the process and the
/// first line it printed (where it listens).
async fn serve(db: &Db, args: &[&str], token: Option<&str>) -> (tokio::process::Child, String) {
    let mut command = tokio::process::Command::new(JOBS);
    command
        .arg("serve")
        .args(args)
        .env("DATABASE_URL", db.url())
        .env_remove("JOBS_CONSOLE_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(token) = token {
        command.env("JOBS_CONSOLE_TOKEN", token);
    }
    let mut child = command.spawn().expect("jobs serve starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the address within 30 s")
        .unwrap()
        .expect("a first line");
    (child, first)
}

/// The status line of `GET /` sent to `address` as `host`.
async fn status_of(address: &str, host: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(
            format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response.lines().next().unwrap_or_default().to_owned()
}

/// Sends SIGTERM and waits for a clean exit.
async fn stop(mut child: tokio::process::Child) {
    let pid = child.id().unwrap().to_string();
    let killed = tokio::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("stops within 30 s of SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn a_console_with_a_token_asks_visitors_to_sign_in_and_stops_on_sigterm() {
    let db = Db::migrated().await;
    let (child, first) = serve(&db, &["--listen", "127.0.0.1:0"], Some(TOKEN)).await;
    assert!(first.ends_with(" (access token required)"), "{first}");
    let address = address_in(&first);
    assert_eq!(
        status_of(&address, "console.internal").await,
        "HTTP/1.1 303 See Other"
    );
    stop(child).await;
}

#[tokio::test]
async fn a_console_without_a_token_answers_loopback_names_only() {
    let db = Db::migrated().await;
    let (child, first) = serve(&db, &["--listen", "127.0.0.1:0"], None).await;
    let address = address_in(&first);
    assert_eq!(status_of(&address, "localhost").await, "HTTP/1.1 200 OK");
    assert_eq!(
        status_of(&address, "rebound.example").await,
        "HTTP/1.1 403 Forbidden"
    );
    stop(child).await;
}

#[tokio::test]
async fn a_read_only_console_may_listen_on_every_address() {
    let db = Db::migrated().await;
    let (child, first) = serve(&db, &["--listen", "0.0.0.0:0", "--read-only"], None).await;
    assert!(first.ends_with(" (read-only)"), "{first}");
    stop(child).await;
}

#[tokio::test]
async fn every_action_is_logged_on_stderr_as_an_audit_line() {
    let db = Db::migrated().await;
    let (mut child, first) = serve(&db, &["--listen", "127.0.0.1:0"], None).await;
    let address = address_in(&first);
    let page = exchange(
        &address,
        "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    )
    .await;
    let csrf = page
        .lines()
        .find_map(|line| line.strip_prefix("set-cookie: jobs_console_csrf="))
        .and_then(|cookie| cookie.split(';').next())
        .expect("a CSRF cookie")
        .to_owned();
    let form = format!("queue=emails&reason=provider+down&csrf={csrf}");
    let response = exchange(
        &address,
        &format!(
            "POST /queues/pause HTTP/1.1\r\nHost: localhost\r\nCookie: jobs_console_csrf={csrf}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{form}",
            form.len()
        ),
    )
    .await;
    assert!(response.starts_with("HTTP/1.1 303"), "{response}");
    let mut stderr = child.stderr.take().unwrap();
    stop(child).await;
    let mut log = String::new();
    stderr.read_to_string(&mut log).await.unwrap();
    let audit: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("jobs_console::audit"))
        .collect();
    assert_eq!(audit.len(), 1, "{log}");
    for part in [
        "actor=\"console at 127.0.0.1\"",
        "action=\"pause queue\"",
        "target=\"emails\"",
        "result=\"Paused queue emails\"",
    ] {
        assert!(audit[0].contains(part), "{part} in {}", audit[0]);
    }
}

/// Sends `request` to `address` and reads the whole response.
async fn exchange(address: &str, request: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

#[tokio::test]
async fn a_host_name_to_answer_needs_a_token_or_read_only() {
    let db = Db::migrated().await;
    let error = db
        .jobs(&[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--allow-host",
            "ops.internal",
        ])
        .await
        .one_line_error();
    assert!(error.contains("needs an access token"), "{error}");
}
