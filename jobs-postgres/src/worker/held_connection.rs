//! A pool connection kept across statements that follow each other closely.
//!
//! PostgreSQL keeps a prepared statement's plan per connection: a statement run on a different
//! pool connection each time is planned anew on each of them (five one-off plans, then the
//! generic one), and each pool checkout costs a round trip to test the connection. A busy
//! producer or completer runs its statement back to back, so it keeps one connection while the
//! statements follow each other, and gives it back to the pool as soon as they stop. Under load
//! it holds no more than it used to: its statements held a connection most of the time anyway.
//!
//! A connection also goes back once the pool is closed, so that closing it does not wait for a
//! busy queue to drain, and after [`LONGEST_HOLD`], so that the pool's own care of its
//! connections (their lifetime, the test on checkout) reaches it under endless load too.

use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};

/// How long one connection is kept at most before it goes back to the pool.
pub const LONGEST_HOLD: Duration = Duration::from_secs(60);

/// A pool connection held between statements, or none.
#[derive(Debug, Default)]
pub struct HeldConnection {
    /// The connection, and when it was taken from the pool.
    connection: Option<(PoolConnection<Postgres>, Instant)>,
}

impl HeldConnection {
    /// The connection held, taken from `pool` first when none is, when the one held has been
    /// held for [`LONGEST_HOLD`], or when `pool` is closed (which then refuses the checkout).
    pub async fn take_or_acquire(
        &mut self,
        pool: &PgPool,
    ) -> Result<&mut PoolConnection<Postgres>, sqlx::Error> {
        let expired = self
            .connection
            .as_ref()
            .is_some_and(|(_, taken)| taken.elapsed() >= LONGEST_HOLD);
        if expired || pool.is_closed() {
            self.drop_connection();
        }
        match &mut self.connection {
            Some((connection, _)) => Ok(connection),
            held => {
                let (connection, _) = held.insert((pool.acquire().await?, Instant::now()));
                Ok(connection)
            }
        }
    }

    /// Whether a connection is held.
    pub fn is_held(&self) -> bool {
        self.connection.is_some()
    }

    /// Gives the connection back to the pool (which tests it as it comes back, and closes it
    /// if broken): after an error, or when statements stop following each other.
    pub fn drop_connection(&mut self) {
        self.connection = None;
    }
}
