//! Operating the queue: health numbers, dead letters and retention, for tools and for Rust.
//!
//! Everything an operator does goes through here; the `jobs` command-line tool is a thin layer
//! over it.
//!
//! - [`stats`]: per queue and kind, the jobs ready, scheduled, running (and with an expired
//!   lease), dead, done and cancelled, and how long the oldest ready job has waited, in one
//!   statement whose cost follows the live rows, not the retained ones (done and cancelled are
//!   counted exactly while there are few, by a second statement that reads at most
//!   [`EXACT_RETAINED_BOUND`] rows, and estimated beyond).
//!   The outbox's numbers come with them: unpublished rows, the age of the oldest, parked rows.
//! - [`check`]: turns those numbers into [`Violation`]s of [`HealthThresholds`] (by default: any
//!   dead job, a ready job waiting over 5 minutes, a lease expired for over a minute, an outbox
//!   row unpublished for over 5 minutes, any parked outbox row, due jobs that no live worker
//!   can claim for over a minute, a job waiting for other jobs or a batch open for over an
//!   hour).
//! - [`dead`]: list and inspect dead jobs with their whole error history, replay them (attempts
//!   reset, history kept, ready at once) or discard them, selected by id, kind, queue or age.
//! - [`remove_schedule`]: forgets a schedule the code no longer declares (one still kept up
//!   with only when forced); [`trigger_schedule`] enqueues one extra run of a schedule now.
//! - [`find_jobs`]: pages through jobs of any state by id, kind, queue, status, dedupe key,
//!   enqueue or finish time and error text, newest first, each page reading a bounded number
//!   of rows however many the table retains; [`job_details`] shows one job in full, its output
//!   included; [`output_of`] reads a done job's output typed.
//! - [`outbox`]: list parked outbox rows and replay them.
//! - [`run_now`]: makes jobs waiting for a later time (a retry backing off, a delayed job) due
//!   now.
//! - [`cancel`], [`cancel_by_dedupe_key`], [`cancel_matching`]: cancel ready jobs (due or
//!   scheduled) at once and ask running ones to stop (they see it through
//!   `ctx.cancel_requested()`, and end cancelled unless their run succeeds), by id, by kind and
//!   dedupe key, or by filter in batches with a preview count ([`preview_cancel`]).
//! - [`pause_queue`] / [`resume_queue`]: stop and restart the claims of a queue in every worker
//!   process (running jobs finish); [`paused_queues`] lists the pauses.
//! - [`live_workers`]: the worker processes running now, with their queues and kinds (each
//!   records itself and refreshes the record every few seconds).
//! - [`throughput`]: the runs ended per minute, queue and kind (done, retried, dead, cancelled)
//!   over the last hours, from a small rollup the workers keep, not from the retained jobs.
//! - [`workflow`]: the jobs connected to one through dependencies, with their states and
//!   edges, and its batch; [`job_details`] names a job's prerequisites and dependents.
//! - [`retention`]: deletes done and cancelled jobs and published outbox rows past an age, a
//!   batch at a time, one process at a time; every worker runs it (see
//!   [`WorkerConfig::retention`]). Dead jobs and parked rows are never deleted automatically.
//!
//! Every operation is safe while workers run, and safe to repeat. Those that change the queue
//! have a read-only preview with the same selection ([`preview_replay`], [`preview_discard`],
//! [`preview_replay_parked`], [`Retention::preview`]) that shows what they would change.
//!
//! [`WorkerConfig::retention`]: crate::WorkerConfig::retention

mod cancel;
pub mod dead;
mod error;
pub mod find;
mod health;
mod human;
mod limits;
pub mod outbox;
mod pauses;
pub mod retention;
mod run_now;
mod schedules;
mod stats;
mod throughput;
mod workers;
pub mod workflow;

pub use crate::output::{output_of, OutputError};
pub use cancel::{
    cancel, cancel_by_dedupe_key, cancel_matching, cancel_matching_batch, preview_cancel,
    CancelFilter, CancelNote, CancelReport, NotCancellable, ReadyState, CANCEL_BATCH_SIZE,
    MAX_CANCEL_NOTE_LEN,
};
pub use dead::{
    count_dead, discard, discard_batch, job_details, list_dead, preview_discard, preview_replay,
    replay, replay_batch, AttemptRecord, Batch, DeadFilter, DeadJob, DiscardReport, JobDetails,
    JobRef, JobState, ReplayReport, SkippedReplay,
};
pub use error::AdminError;
pub use find::{
    find_jobs, Cursor, InvalidCursor, JobFilter, JobPage, JobStatus, JobSummary, PageRequest,
    UnknownStatus, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE,
};
pub use health::{check, HealthThresholds, Violation, MISSING_AFTER_TICKS};
pub use human::HumanDuration;
pub(crate) use limits::add_limit_stats;
pub use limits::{KindLimits, LimitStats};
pub use outbox::{list_parked, preview_replay_parked, replay_parked, ParkedRow};
pub use pauses::{
    pause_queue, paused_queues, resume_queue, PauseOutcome, QueuePause, ResumeOutcome,
    MAX_PAUSE_NOTE_LEN,
};
pub use retention::{Retention, RetentionConfig, RetentionReport};
pub use run_now::{run_now, RunNowReport};
pub use schedules::{
    preview_schedule_removal, remove_schedule, trigger_schedule, Removal, ScheduleRemoval, Trigger,
};
pub(crate) use stats::from_rows as stats_from_rows;
pub use stats::{
    stats, Counts, KindStats, OutboxStats, RetainedCounts, ScheduleStats, Stats,
    EXACT_RETAINED_BOUND, MAX_COUNTED_TICKS,
};
pub use throughput::{throughput, ThroughputPoint, MAX_THROUGHPUT_WINDOW};
pub use workers::{live_workers, LiveWorker, WorkerQueue};
pub use workflow::{
    workflow, BlockingJob, Dependent, OpenBatch, Prerequisite, WaitingJob, Workflow, WorkflowJob,
    DEFAULT_WORKFLOW_LIMIT, MAX_LISTED_LINKS, MAX_WORKFLOW_LIMIT, STUCK_LISTED,
};
