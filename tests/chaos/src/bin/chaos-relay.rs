//! The outbox relay the chaos tests kill: relays the outbox of a database to a NATS JetStream
//! stream, one row per batch. With `--hang-after-publish`, it stops dead after the broker has
//! acknowledged the first row, before marking it published, having printed `published <id>` on
//! stdout: the moment a crash costs a second publish, held open for the test to SIGKILL it.
//!
//! ```text
//! chaos-relay --database-url=postgres://... --nats-url=nats://127.0.0.1:4222 \
//!     --subject-prefix=stream_name. [--hang-after-publish]
//! ```
//!
//! Exit codes: 0 when it has nothing left to relay (without `--hang-after-publish`), 2 for a bad
//! command line or setup.

use std::io::Write;
use std::process::ExitCode;

use jobs::outbox::{OutboxMessage, PublishError, Publisher, Relay, RelayConfig};
use jobs_nats::{async_nats, NatsPublisher};
use sqlx::postgres::PgPoolOptions;

/// Publishes through NATS; with `hang`, announces the first acknowledged row and never returns.
struct Hanging {
    inner: NatsPublisher,
    hang: bool,
}

impl Publisher for Hanging {
    async fn publish(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        self.inner.publish(message).await?;
        if self.hang {
            {
                let mut stdout = std::io::stdout().lock();
                let _ = writeln!(stdout, "published {}", message.id);
                let _ = stdout.flush();
            }
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

fn main() -> ExitCode {
    let (mut database_url, mut nats_url, mut prefix, mut hang) = (None, None, None, false);
    for arg in std::env::args().skip(1) {
        if let Some(value) = arg.strip_prefix("--database-url=") {
            database_url = Some(value.to_owned());
        } else if let Some(value) = arg.strip_prefix("--nats-url=") {
            nats_url = Some(value.to_owned());
        } else if let Some(value) = arg.strip_prefix("--subject-prefix=") {
            prefix = Some(value.to_owned());
        } else if arg == "--hang-after-publish" {
            hang = true;
        } else {
            eprintln!("chaos-relay: unknown argument `{arg}`");
            return ExitCode::from(2);
        }
    }
    let (Some(database_url), Some(nats_url), Some(prefix)) = (database_url, nats_url, prefix)
    else {
        eprintln!("chaos-relay: --database-url, --nats-url and --subject-prefix are needed");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("chaos-relay: cannot start the runtime: {error}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(async move {
        let pool = match PgPoolOptions::new()
            .max_connections(2)
            .connect(&database_url)
            .await
        {
            Ok(pool) => pool,
            Err(error) => {
                eprintln!("chaos-relay: cannot reach the database: {error}");
                return ExitCode::from(2);
            }
        };
        let client = match async_nats::connect(&nats_url).await {
            Ok(client) => client,
            Err(error) => {
                eprintln!("chaos-relay: cannot reach NATS: {error}");
                return ExitCode::from(2);
            }
        };
        let publisher = Hanging {
            inner: NatsPublisher::new(async_nats::jetstream::new(client)).subject_prefix(prefix),
            hang,
        };
        let config = RelayConfig {
            batch_size: 1,
            ..RelayConfig::default()
        };
        let relay = match Relay::new(pool, publisher, config) {
            Ok(relay) => relay,
            Err(error) => {
                eprintln!("chaos-relay: {error}");
                return ExitCode::from(2);
            }
        };
        loop {
            match relay.run_once().await {
                Ok(report) if report.claimed == 0 => return ExitCode::SUCCESS,
                Ok(_) => {}
                Err(error) => {
                    eprintln!("chaos-relay: {error}");
                    return ExitCode::from(2);
                }
            }
        }
    })
}
