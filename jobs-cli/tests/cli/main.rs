//! Every `jobs` command run as the built binary against a real PostgreSQL, one fresh database
//! per test: what it prints, and its exit code.

mod fixtures;
mod support;

mod changes;
mod check;
mod dead;
mod errors;
mod escaping;
mod job;
mod migrate;
mod outbox;
mod prune;
mod queue;
mod serve;
mod stats;
mod trigger;
mod workers;
mod workflow;
