//! The console over a real PostgreSQL database, driven through its router: what each page shows,
//! what each control changes, and what the security rules refuse.

mod actions;
mod client;
mod pages;
mod problems;
mod security;
mod workflow;

use jobs_console::{router, ConsoleConfig};
use jobs_testkit::Db;

use client::Client;

/// A migrated database of the test's own, and a client of a console over it.
async fn console(config: ConsoleConfig) -> (Db, Client) {
    let db = Db::migrated().await;
    let client = Client::new(router(db.pool.clone(), config));
    (db, client)
}
