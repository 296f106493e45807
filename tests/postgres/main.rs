//! Integration tests against a real PostgreSQL: each test creates its own database, so they run
//! in parallel. Waiting is done by polling a condition with a deadline, never by sleeping.

mod logs;
mod plans;
mod support;
mod test_jobs;

mod admin_dead;
mod admin_retention;
mod admin_stats;
mod attempts_rule;
mod batches;
mod claim_commit;
mod claim_plans;
mod claim_position;
mod console_plans;
mod dedupe;
mod dependencies;
mod drain;
mod enqueue;
mod enqueue_input;
mod exactly_once;
mod find_jobs;
mod gauges_shared;
mod job_cancel;
mod lease_control;
mod lease_tokens;
mod live_workers;
mod outbox;
mod outcome_writes;
mod outcomes;
mod queue_pause;
mod rescue_refusal;
mod resilience;
mod run_now;
mod schedule_trigger;
mod schedules;
mod schema;
mod shutdown;
mod testing_helpers;
mod throughput;
mod unreachable;
mod unwritable;
mod worker_metrics;
mod worker_start;
mod workflow_ops;
mod workflow_plans;
