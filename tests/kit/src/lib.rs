//! What the workspace's own test suites share (not shipped): [`Db`], a fresh database per test;
//! polling a condition with a deadline instead of sleeping; job rows in any state written
//! straight to the table, typed (durations, not SQL text); the start times rate limits are
//! checked against; and [`ThrowawayCluster`], a private PostgreSQL server that tests of outages
//! stop and start again.

mod cluster;
mod db;
mod job_row;
mod starts;
mod wait;

pub use cluster::{ClusterError, ThrowawayCluster};
pub use db::Db;
pub use job_row::{days, hours, minutes, JobRow, RowState};
pub use starts::{most_started_in_any_window, pace_after_first_window};
pub use wait::{wait_until, wait_until_or, wait_until_within, DEFAULT_WAIT};
