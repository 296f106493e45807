//! Support for tests against a real NATS server with JetStream: the shared server's URL, a
//! private server process a test may kill and restart, unique stream names so that tests run in
//! parallel, and the messages a stream holds.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::stream::{Config, Stream};
use async_nats::jetstream::Context;
use tokio::process::{Child, Command};

/// The shared server the tests use: `NATS_URL`, else `nats://127.0.0.1:4222`.
pub fn shared_url() -> String {
    std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
}

/// A name no other test of any process uses, for streams and subjects: `<prefix>_<pid>_<n>_<t>`
/// (letters, digits and `_` only, valid as a stream name and as a subject token).
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_micros());
    format!(
        "{prefix}_{}_{}_{micros}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Creates stream `name` capturing `<name>.>` with a file store and JetStream's defaults (a
/// 2-minute duplicate window), its messages kept an hour at most; returns it and the subject
/// prefix (`<name>.`) to publish under. Delete it at the end of the test.
pub async fn create_stream(
    jetstream: &Context,
    name: &str,
) -> Result<(Stream, String), async_nats::jetstream::context::CreateStreamError> {
    let stream = jetstream
        .create_stream(Config {
            name: name.to_owned(),
            subjects: vec![format!("{name}.>")],
            max_age: Duration::from_secs(3_600),
            ..Config::default()
        })
        .await?;
    Ok((stream, format!("{name}.")))
}

/// One message of a stream, as a test looks at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// Its sequence in the stream.
    pub sequence: u64,
    /// Its subject.
    pub subject: String,
    /// Its `Nats-Msg-Id` header, when it has one.
    pub message_id: Option<String>,
    /// Its payload, as text.
    pub payload: String,
}

/// Every message stream `name` holds, by sequence.
pub async fn stored_messages(
    jetstream: &Context,
    name: &str,
) -> Result<Vec<StoredMessage>, Box<dyn std::error::Error + Send + Sync>> {
    let mut stream = jetstream.get_stream(name).await?;
    let state = stream.info().await?.state.clone();
    let mut messages = Vec::new();
    if state.messages == 0 {
        return Ok(messages);
    }
    for sequence in state.first_sequence..=state.last_sequence {
        let message = stream.get_raw_message(sequence).await?;
        messages.push(StoredMessage {
            sequence,
            subject: message.subject.to_string(),
            message_id: message
                .headers
                .get(async_nats::header::NATS_MESSAGE_ID)
                .map(|value| value.as_str().to_owned()),
            payload: String::from_utf8_lossy(&message.payload).into_owned(),
        });
    }
    Ok(messages)
}

/// A nats-server process of a test's own, with JetStream and a store in a temporary folder,
/// listening on a free port of 127.0.0.1: a test may kill it and start it again on the same
/// port and store. `NATS_SERVER` names the binary (default `nats-server` on the `PATH`). Killed
/// when dropped.
pub struct NatsServer {
    port: u16,
    store: tempfile::TempDir,
    child: Option<Child>,
}

/// How long a starting server gets to listen.
const START_TIMEOUT: Duration = Duration::from_secs(20);

impl NatsServer {
    /// Starts one and waits until it listens.
    pub async fn start() -> io::Result<Self> {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let mut server = Self {
            port,
            store: tempfile::tempdir()?,
            child: None,
        };
        server.restart().await?;
        Ok(server)
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills it with SIGKILL, as a crash would, and waits until it is gone.
    pub async fn kill(&mut self) -> io::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().await?;
        }
        Ok(())
    }

    /// Starts it (again) on the same port and store, and waits until it listens.
    pub async fn restart(&mut self) -> io::Result<()> {
        self.kill().await?;
        let binary = std::env::var("NATS_SERVER").unwrap_or_else(|_| "nats-server".to_owned());
        let child = Command::new(&binary)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.store.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| {
                io::Error::new(error.kind(), format!("cannot start `{binary}`: {error}"))
            })?;
        self.child = Some(child);
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let deadline = Instant::now() + START_TIMEOUT;
        while TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_err() {
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("nats-server did not listen on {address} within {START_TIMEOUT:?}"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}
