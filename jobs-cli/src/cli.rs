//! The command line: every command, flag and default.

use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use jobs_core::JobId;
use jobs_postgres::admin::{Cursor, JobStatus};

/// Operate a jobs queue on PostgreSQL: health numbers, alerting, live workers, throughput, dead
/// letters, parked outbox rows, retention.
///
/// Connects to DATABASE_URL, or --database-url. Exit codes: 0 success (for `check`: healthy),
/// 1 `check` found a threshold crossed, 2 the command could not run (one line on stderr says
/// why).
///
/// Commands that change the queue (dead replay and discard, outbox replay, prune, schedule
/// remove, job cancel by filter) take --dry-run (show what would change, change nothing) and --json. A broad
/// selection (dead jobs chosen without --id, every parked outbox row) asks for confirmation on
/// a terminal; --yes skips the question, and without a terminal on stdin (scripts, cron) such a
/// command is refused unless --yes is given.
///
/// Text from the database (errors, names, keys, payloads) is printed with control characters
/// escaped (`\u{1b}`, `\r`, `\n`); --json prints it exactly, as JSON escapes.
#[derive(Debug, Parser)]
#[command(name = "jobs", version)]
pub struct Cli {
    /// PostgreSQL URL of the database holding the jobs (postgres://user:password@host:port/db).
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,
    /// How long to wait for the database to accept a connection.
    #[arg(long, global = true, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    pub connect_timeout: Duration,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Bring the jobs schema up to date (safe to run from many processes at once).
    Migrate,
    /// Show the jobs of every queue and kind by state, and how long the oldest ready job waited.
    ///
    /// READY are due jobs waiting for a slot, SCHEDULED wait for their run_at (retries backing
    /// off, delayed jobs), EXPIRED are running jobs whose lease expired and that no rescue has
    /// brought back yet. DONE and CANCELLED are counted while there are at most 10,000 of them,
    /// then estimated from the planner's statistics (marked `~`), `?` when there is no estimate
    /// yet.
    Stats {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// List the live worker processes: host, pid, version, queues with their concurrency, kinds.
    ///
    /// Each worker records itself when it starts, refreshes the record every few seconds (5 s
    /// by default) and deletes it when it stops; one not seen for three of its intervals is gone
    /// and no longer listed.
    Workers {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show the runs that ended per minute, queue and kind: done, retried, dead, cancelled.
    ///
    /// Read from the counts the workers write every few seconds (kept 2 days), not from the
    /// jobs: cheap at any table size. A run is counted in the minute its worker wrote it, a few
    /// seconds after it ended; a worker killed loses the counts it had not written yet.
    Throughput {
        /// How many minutes back, the current one included.
        #[arg(long, value_name = "N", default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..=527_040))]
        minutes: u32,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Dead letters: list, show, replay or discard dead jobs.
    Dead {
        /// What to do with dead jobs.
        #[command(subcommand)]
        command: DeadCommand,
    },
    /// The outbox: list parked rows (events that could not be published) and replay them.
    Outbox {
        /// What to do with parked outbox rows.
        #[command(subcommand)]
        command: OutboxCommand,
    },
    /// Jobs of any state: find them, show one, run one now instead of at its later time, or
    /// cancel them.
    Job {
        /// What to do with the jobs.
        #[command(subcommand)]
        command: JobCommand,
    },
    /// Queues: pause one (no worker claims its jobs; running ones finish) and resume it.
    Queue {
        /// What to do with a queue.
        #[command(subcommand)]
        command: QueueCommand,
    },
    /// Schedules: remove one the code no longer declares (`jobs stats` lists them).
    Schedule {
        /// What to do with a schedule.
        #[command(subcommand)]
        command: ScheduleCommand,
    },
    /// Delete done and cancelled jobs that finished before a given age, and outbox rows published
    /// before it (dead jobs and parked rows are kept).
    ///
    /// Workers do this by themselves (every minute, 7 days' retention by default); this runs it
    /// now, until nothing older is left. Only one process deletes at a time.
    ///
    /// Never asks for confirmation: it deletes only what workers delete by themselves once it is
    /// older than their retention. See what it would delete with --dry-run.
    Prune {
        /// Delete what finished longer ago than this.
        #[arg(long, value_name = "AGE", default_value = "7d", value_parser = duration)]
        older_than: Duration,
        /// Jobs deleted per statement.
        #[arg(long, value_name = "N", default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..))]
        batch_size: u32,
        /// Preview or JSON.
        #[command(flatten)]
        change: ChangeArgs,
    },
    /// Serve the web console: queues, jobs, dead letters, schedules and the outbox, with the
    /// controls to act on them.
    ///
    /// Listens on 127.0.0.1:8080 unless --listen says otherwise. An address other hosts can reach
    /// needs an access token (read from --token-file, or from the environment variable
    /// JOBS_CONSOLE_TOKEN; never from a flag's value) or --read-only. Without a token the console
    /// answers only requests addressed to localhost, 127.0.0.1 or [::1] (and --allow-host
    /// names). Every action is logged on stderr (target `jobs_console::audit`). Stops on SIGINT
    /// or SIGTERM.
    Serve {
        /// Address to listen on (port 0: any free port; the address is printed on stdout).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
        /// Show everything, change nothing.
        #[arg(long)]
        read_only: bool,
        /// Hide job payloads and parked outbox messages (they may hold personal data).
        #[arg(long)]
        hide_payloads: bool,
        /// File holding the access token (at least 16 printable characters). Without it, the
        /// token is read from JOBS_CONSOLE_TOKEN when that is set.
        #[arg(long, value_name = "FILE")]
        token_file: Option<std::path::PathBuf>,
        /// A host name the console answers without a token, besides the loopback ones (for a
        /// proxy that forwards its own name); requests to it may only look, so it needs
        /// --read-only or an access token.
        #[arg(long, value_name = "NAME")]
        allow_host: Vec<String>,
        /// Mark the console's cookies Secure (sent over HTTPS only): for a console behind a
        /// TLS-terminating proxy.
        #[arg(long)]
        secure_cookies: bool,
    },
    /// Exit 1 with one line per threshold crossed, 0 when healthy: for cron, probes and
    /// monitoring.
    Check {
        /// Most dead jobs one kind may have.
        #[arg(long, value_name = "N", default_value_t = 0)]
        max_dead: u64,
        /// Longest a due job may wait for a worker.
        #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = duration)]
        max_ready_age: Duration,
        /// Longest a lease may stay expired without a rescue (rescue sweeps every 5 s by
        /// default, so more means no worker is rescuing).
        #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = duration)]
        max_expired_lease_age: Duration,
        /// How long each tick's run gets to succeed; a schedule with two ticks past this since
        /// its last success is reported as missing runs.
        #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = duration)]
        schedule_grace: Duration,
        /// Longest an outbox row may wait to be published (longer: no relay runs, or the broker
        /// is unreachable).
        #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = duration)]
        max_unpublished_age: Duration,
        /// Most parked outbox rows there may be.
        #[arg(long, value_name = "N", default_value_t = 0)]
        max_parked: u64,
        /// Longest a queue may stay paused (its waiting jobs are not reported as old meanwhile:
        /// the pause is).
        #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = duration)]
        max_paused: Duration,
        /// Longest due jobs may wait while no live worker can claim them (none serves their
        /// queue, or none that does runs their kind); they are reported that way instead of as
        /// old ready jobs.
        #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = duration)]
        max_unserved_age: Duration,
        /// Longest a job may wait for other jobs (its prerequisites, or its batch's members),
        /// and a batch may stay open: longer is a stuck workflow.
        #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = duration)]
        max_waiting_age: Duration,
    },
}

/// What to do with jobs.
#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Find jobs of any state, newest first, a page at a time: a table, then the cursor of the
    /// next page (pass it to --after).
    ///
    /// Each page examines at most 10,000 jobs: a search that only a few old jobs match (a rare
    /// queue, an old time range, an error text, without --kind) may print a short or empty
    /// page and a cursor to go on from. With --kind, jobs of that kind are found through an
    /// index; --dedupe-key needs --kind.
    List(JobListArgs),
    /// Show one job of any state with its payload and its whole error history.
    Show {
        /// The job's id.
        id: JobId,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show the workflow of a job: the jobs connected to it through dependencies (its
    /// prerequisites and dependents, transitively), each with its state and the jobs it runs
    /// after, and the batch it is a member or the callback of.
    Workflow {
        /// The job's id.
        id: JobId,
        /// Most jobs listed.
        #[arg(long, value_name = "N", default_value_t = jobs_postgres::admin::DEFAULT_WORKFLOW_LIMIT)]
        limit: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Make jobs that wait for a later time (a retry backing off, a delayed or snoozed job) due
    /// now: idle workers claim them at once. Attempts and error history stay as they are.
    ///
    /// Jobs due already, running, finished or dead are left alone and listed.
    RunNow {
        /// The jobs' ids.
        #[arg(required = true, value_name = "ID")]
        ids: Vec<JobId>,
        /// Print JSON instead of sentences.
        #[arg(long)]
        json: bool,
    },
    /// Cancel jobs: ready ones (due or scheduled) at once, so no worker runs them; running
    /// ones are asked to stop (the job sees it through `ctx.cancel_requested()`) and end
    /// cancelled unless their run succeeds.
    ///
    /// By id (`jobs job cancel 41 42`), by kind and dedupe key (`--kind K --dedupe-key KEY`), or
    /// by filter (--kind, --queue, --state, --older-than, or --all) over ready jobs only, in
    /// batches of 1,000. A filter asks for confirmation on a terminal, and is refused without
    /// one unless --yes is given; --dry-run counts what it would cancel. Jobs done, dead or
    /// cancelled already are left alone and listed.
    Cancel(JobCancel),
}

/// Which jobs `jobs job cancel` cancels, who asks and why.
#[derive(Debug, Args)]
#[command(group(
    ArgGroup::new("cancel_selection")
        .required(true)
        .multiple(true)
        .args(["ids", "kind", "queue", "state", "older_than", "all"])
))]
pub struct JobCancel {
    /// The jobs' ids (ready: cancelled; running: asked to stop).
    #[arg(value_name = "ID", conflicts_with_all = ["kind", "queue", "state", "older_than", "all", "dry_run"])]
    pub ids: Vec<JobId>,
    /// Ready jobs of this kind; with --dedupe-key, the job of this kind holding that key.
    #[arg(long)]
    pub kind: Option<String>,
    /// The job of --kind holding this dedupe key (ready: cancelled; running: asked to stop).
    #[arg(long, value_name = "KEY", requires = "kind", conflicts_with_all = ["queue", "state", "older_than", "dry_run"])]
    pub dedupe_key: Option<String>,
    /// Ready jobs of this queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// Only ready jobs due now (`ready`) or only those waiting for a later time (`scheduled`:
    /// retries backing off, delayed jobs); both without it.
    #[arg(long, value_enum)]
    pub state: Option<CancelState>,
    /// Ready jobs enqueued at least this long ago (e.g. 30m, 7d).
    #[arg(long, value_name = "AGE", value_parser = duration)]
    pub older_than: Option<Duration>,
    /// Every ready job of every queue.
    #[arg(long, conflicts_with_all = ["kind", "queue", "state", "older_than"])]
    pub all: bool,
    /// Why, for the record (kept on each job).
    #[arg(long)]
    pub reason: Option<String>,
    /// Who is cancelling, for the record [default: $USER@hostname].
    #[arg(long, value_name = "WHO")]
    pub by: Option<String>,
    /// Preview (by filter only) or JSON.
    #[command(flatten)]
    pub change: ChangeArgs,
    /// Confirmation (by filter only).
    #[command(flatten)]
    pub confirm: ConfirmArgs,
}

/// Which ready jobs a cancellation by filter selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CancelState {
    /// Due now, waiting for a worker.
    Ready,
    /// Waiting for a later time: a retry backing off, a delayed or snoozed job.
    Scheduled,
}

/// Which jobs `job list` shows, and which page.
#[derive(Debug, Args)]
pub struct JobListArgs {
    /// Only the job with this id.
    #[arg(long, value_name = "ID")]
    pub id: Option<JobId>,
    /// Only jobs of this kind.
    #[arg(long)]
    pub kind: Option<String>,
    /// Only jobs of this queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// Only jobs in this state: waiting (for other jobs), ready (due), scheduled (waiting for a
    /// later time), running, done, dead or cancelled.
    #[arg(long, value_name = "STATE")]
    pub state: Option<JobStatus>,
    /// Only jobs holding this dedupe key (needs --kind).
    #[arg(long, value_name = "KEY", requires = "kind")]
    pub dedupe_key: Option<String>,
    /// Only jobs enqueued since then: a time (2026-05-01T12:00:00Z) or an age (90m, 2d).
    #[arg(long, value_name = "TIME|AGE", value_parser = moment)]
    pub since: Option<DateTime<Utc>>,
    /// Only jobs enqueued before then: a time or an age.
    #[arg(long, value_name = "TIME|AGE", value_parser = moment)]
    pub until: Option<DateTime<Utc>>,
    /// Only jobs that finished since then: a time or an age.
    #[arg(long, value_name = "TIME|AGE", value_parser = moment)]
    pub finished_since: Option<DateTime<Utc>>,
    /// Only jobs that finished before then: a time or an age.
    #[arg(long, value_name = "TIME|AGE", value_parser = moment)]
    pub finished_until: Option<DateTime<Utc>>,
    /// Only jobs one of whose errors holds this text, in any case.
    #[arg(long, value_name = "TEXT")]
    pub error: Option<String>,
    /// Show at most this many jobs (1 to 500).
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub limit: usize,
    /// Start after this cursor, printed by the previous page.
    #[arg(long, value_name = "CURSOR")]
    pub after: Option<Cursor>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// What to do with a queue.
#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Stop every worker process from claiming the queue's jobs, from their next claim on.
    ///
    /// Jobs already running finish; new jobs are still accepted and wait. The pause is kept in
    /// the database: it holds across restarts until `jobs queue resume`. `jobs stats` lists
    /// paused queues, and `jobs check` reports one paused longer than --max-paused.
    Pause {
        /// The queue.
        queue: String,
        /// Why, for the record (shown by `jobs stats`).
        #[arg(long)]
        reason: Option<String>,
        /// Who is pausing it, for the record [default: $USER@hostname].
        #[arg(long, value_name = "WHO")]
        by: Option<String>,
        /// Print JSON instead of a sentence.
        #[arg(long)]
        json: bool,
    },
    /// Let workers claim the queue's jobs again (idle workers start at once).
    Resume {
        /// The queue.
        queue: String,
        /// Print JSON instead of a sentence.
        #[arg(long)]
        json: bool,
    },
}

/// What to do with parked outbox rows.
#[derive(Debug, Subcommand)]
pub enum OutboxCommand {
    /// List parked outbox rows with their last error, oldest id first.
    List {
        /// Only rows of this topic.
        #[arg(long)]
        topic: Option<String>,
        /// Show at most this many.
        #[arg(long, value_name = "N", default_value_t = 50)]
        limit: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Make parked rows pending again (attempts reset, published at once by a relay).
    ///
    /// A replayed row goes before the rows of its topic still pending, after those already
    /// published. Safe to repeat: rows no longer parked are left alone.
    ///
    /// --all asks for confirmation on a terminal, and is refused without one unless --yes is
    /// given.
    Replay {
        /// This row (repeat for several).
        #[arg(long = "id", value_name = "ID", required_unless_present = "all")]
        ids: Vec<i64>,
        /// Every parked row.
        #[arg(long, conflicts_with = "ids")]
        all: bool,
        /// Preview or JSON.
        #[command(flatten)]
        change: ChangeArgs,
        /// Confirmation.
        #[command(flatten)]
        confirm: ConfirmArgs,
    },
}

/// What to do with a schedule.
#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Forget a schedule, so that it is no longer listed or checked; its jobs stay. A schedule
    /// still kept up with (fewer than two ticks due since the last one dealt with) is refused
    /// without --force: a worker that still declares it registers it again.
    Remove {
        /// The schedule's name.
        name: String,
        /// Remove it even when its ticks are being kept up with.
        #[arg(long)]
        force: bool,
        /// Preview or JSON.
        #[command(flatten)]
        change: ChangeArgs,
    },
    /// Enqueue one run of a schedule now, with the settings its workers registered; its ticks
    /// are untouched. Each call is one more run.
    Trigger {
        /// The schedule's name (`jobs stats` lists them).
        name: String,
        /// Print JSON instead of a sentence.
        #[arg(long)]
        json: bool,
    },
}

/// What to do with dead jobs.
#[derive(Debug, Subcommand)]
pub enum DeadCommand {
    /// List dead jobs with their last error, oldest id first.
    List {
        /// Which dead jobs.
        #[command(flatten)]
        filter: FilterArgs,
        /// Show at most this many.
        #[arg(long, value_name = "N", default_value_t = 50)]
        limit: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one job with its payload and its whole error history.
    Show {
        /// The job's id.
        id: JobId,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Make dead jobs ready again: attempts reset to 0, error history kept, run at once.
    ///
    /// Safe while workers run and safe to repeat: jobs no longer dead are left alone. A job
    /// whose `active` dedupe key is held by another ready or running job is skipped and
    /// reported: replay it once that job is finished.
    ///
    /// Without --id the selection is broad: it asks for confirmation on a terminal, and is
    /// refused without one unless --yes is given.
    Replay(DeadChange),
    /// Delete dead jobs and their history for good.
    ///
    /// Without --id the selection is broad: it asks for confirmation on a terminal, and is
    /// refused without one unless --yes is given.
    Discard(DeadChange),
}

/// The arguments of a change to dead jobs (`dead replay`, `dead discard`).
#[derive(Debug, Args)]
pub struct DeadChange {
    /// Which dead jobs.
    #[command(flatten)]
    pub selection: Selection,
    /// Preview or JSON.
    #[command(flatten)]
    pub change: ChangeArgs,
    /// Confirmation.
    #[command(flatten)]
    pub confirm: ConfirmArgs,
}

/// How a command that changes the queue runs and reports.
#[derive(Debug, Clone, Copy, Args)]
pub struct ChangeArgs {
    /// Change nothing: show what the command would affect now.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Whether a broad selection may go ahead without asking.
#[derive(Debug, Clone, Copy, Args)]
pub struct ConfirmArgs {
    /// Go ahead without asking, even when the selection is broad (required without a terminal
    /// on stdin).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// Narrows a listing of dead jobs.
#[derive(Debug, Args)]
pub struct FilterArgs {
    /// Only jobs of this kind.
    #[arg(long)]
    pub kind: Option<String>,
    /// Only jobs of this queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// Only jobs dead for at least this long (e.g. 30m, 7d).
    #[arg(long, value_name = "AGE", value_parser = duration)]
    pub older_than: Option<Duration>,
}

/// Which dead jobs to replay or discard: at least one condition, or --all. Conditions add up.
#[derive(Debug, Args)]
#[group(id = "selection", required = true, multiple = true)]
pub struct Selection {
    /// This job (repeat for several).
    #[arg(long = "id", value_name = "ID")]
    pub ids: Vec<JobId>,
    /// Jobs of this kind.
    #[arg(long)]
    pub kind: Option<String>,
    /// Jobs of this queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// Jobs dead for at least this long (e.g. 30m, 7d).
    #[arg(long, value_name = "AGE", value_parser = duration)]
    pub older_than: Option<Duration>,
    /// Every dead job.
    #[arg(long, conflicts_with_all = ["ids", "kind", "queue", "older_than"])]
    pub all: bool,
}

/// Parses a moment: an RFC 3339 time (`2026-05-01T12:00:00Z`), or an age (`90m`, `2d`) meaning
/// that long before now by this machine's clock.
fn moment(text: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc));
    }
    let age = jobs_core::parse_duration(text).map_err(|_| {
        format!(
            "`{}` is neither a time (2026-05-01T12:00:00Z) nor an age (90m, 2d)",
            text.escape_debug()
        )
    })?;
    chrono::Duration::from_std(age)
        .ok()
        .and_then(|age| Utc::now().checked_sub_signed(age))
        .ok_or_else(|| format!("`{text}` is too long ago"))
}

/// Parses `"30s"`, `"5m"`, `"7d"`, `"1h30m"`.
fn duration(text: &str) -> Result<Duration, String> {
    jobs_core::parse_duration(text).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
