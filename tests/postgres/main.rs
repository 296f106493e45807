//! Integration tests against a real PostgreSQL: each test creates its own database, so they run
//! in parallel. Waiting is done by polling a condition with a deadline, never by sleeping.

mod support;
mod test_jobs;

mod dedupe;
mod drain;
mod enqueue;
mod outcomes;
mod resilience;
mod schema;
mod shutdown;
mod worker_start;
