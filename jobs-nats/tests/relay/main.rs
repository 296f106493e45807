//! The outbox relay against a real NATS server with JetStream: the shared one for most tests
//! (each with its own stream), a private one for the outage. Each test has its own database.
//! Waiting is done by polling a condition with a deadline, never by sleeping (the outage's 10 s
//! are the fault injected, not a wait).

mod support;

mod delivery;
mod ids;
mod outage;
mod parking;
mod topics;
