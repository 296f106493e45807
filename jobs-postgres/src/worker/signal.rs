//! Ready-made shutdown wiring for binaries: SIGINT (ctrl-c) and SIGTERM.

use std::fmt;

/// A signal that asks a worker process to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT, or ctrl-c.
    Interrupt,
    /// SIGTERM, as sent by `kill`, systemd, Kubernetes or Docker.
    Terminate,
}

impl Signal {
    /// The signal's number on Unix (SIGINT 2, SIGTERM 15).
    pub fn number(self) -> i32 {
        match self {
            Signal::Interrupt => 2,
            Signal::Terminate => 15,
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
        })
    }
}

/// How [`Worker::run_until_signalled`](super::Worker::run_until_signalled) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "exit with `exit_code()`: a forced stop should not look like a clean one"]
pub enum Stopped {
    /// One signal: the worker shut down gracefully; every job it held is settled (done, failed,
    /// or handed back as ready).
    Gracefully {
        /// The signal that started the shutdown.
        signal: Signal,
    },
    /// A second signal came during the shutdown: the worker stopped at once. Jobs still running
    /// were abandoned where they stood; their leases bring them back (any worker's rescue makes
    /// them ready once the lease expires).
    Forced {
        /// The second signal.
        signal: Signal,
    },
}

impl Stopped {
    /// The process exit code to end with: 0 after a graceful shutdown, else 128 plus the
    /// signal's number (the shell's convention for a program ended by a signal: 130 for
    /// SIGINT, 143 for SIGTERM).
    pub fn exit_code(self) -> i32 {
        match self {
            Stopped::Gracefully { .. } => 0,
            Stopped::Forced { signal } => 128 + signal.number(),
        }
    }
}

/// SIGINT and SIGTERM as a stream, listened to from creation on: once created, these signals
/// no longer end the process by themselves.
pub(crate) struct Signals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Starts listening. A signal that cannot be listened to is logged and never arrives.
    pub(crate) fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let listen = |kind: SignalKind, name: Signal| match signal(kind) {
                Ok(stream) => Some(stream),
                Err(error) => {
                    tracing::error!(%error, signal = %name, "cannot listen for the signal");
                    None
                }
            };
            Signals {
                interrupt: listen(SignalKind::interrupt(), Signal::Interrupt),
                terminate: listen(SignalKind::terminate(), Signal::Terminate),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// The next signal.
    pub(crate) async fn next(&mut self) -> Signal {
        #[cfg(unix)]
        {
            async fn recv(stream: Option<&mut tokio::signal::unix::Signal>) {
                match stream {
                    Some(stream) => {
                        if stream.recv().await.is_none() {
                            std::future::pending::<()>().await;
                        }
                    }
                    None => std::future::pending::<()>().await,
                }
            }
            tokio::select! {
                () = recv(self.interrupt.as_mut()) => Signal::Interrupt,
                () = recv(self.terminate.as_mut()) => Signal::Terminate,
            }
        }
        #[cfg(not(unix))]
        {
            if let Err(error) = tokio::signal::ctrl_c().await {
                tracing::error!(%error, "cannot listen for ctrl-c");
                std::future::pending::<()>().await;
            }
            Signal::Interrupt
        }
    }
}

/// Resolves on the first SIGINT (ctrl-c) or, on Unix, SIGTERM: pass it to
/// [`Worker::run_until`](super::Worker::run_until).
///
/// Only the first signal is handled: once it arrived, further ones are ignored, and the process
/// waits for the graceful shutdown to end. For a second signal that stops at once, use
/// [`Worker::run_until_signalled`](super::Worker::run_until_signalled).
pub async fn shutdown_signal() {
    let signal = Signals::new().next().await;
    tracing::info!(%signal, "{signal} received");
}
