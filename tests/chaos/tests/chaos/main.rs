//! The chaos suite: real `chaos-worker` processes, faults injected from outside (signals,
//! PostgreSQL stopped, backends terminated, connections hogged), and for each fault what it
//! cost: jobs enqueued, completed, lost, run more than once, time to recover. Run with
//! `cargo test -p jobs-chaos -- --nocapture` to see the figures.
//!
//! Faults that restart PostgreSQL or exhaust its connections use a throwaway cluster of their
//! own; the others use a fresh database on the shared server. The tests run one at a time.

mod support;

mod abort;
mod batch_kill;
mod exactly_once;
mod exhaustion;
mod isolation;
mod kill;
mod limits;
mod outage;
mod outbox_kill;
mod pause;
mod queue_pause;
mod schedule;
mod shutdown;
mod terminate;
mod unreachable;
