//! What the command tests set up and read again and again: job times moved, dedupe keys held,
//! schedules and parked outbox rows written straight to their tables, and what a run printed
//! (its lines, its JSON, its exit code).

use serde_json::Value;

use crate::support::{Db, Run};

/// Sets each of `columns` of the jobs `ids` to `ago` before `now()` (`ago` is a PostgreSQL
/// interval, such as `8 days`).
pub async fn backdate(db: &Db, ids: &[i64], columns: &[&str], ago: &str) {
    let set: Vec<String> = columns
        .iter()
        .map(|column| format!("{column} = now() - interval '{ago}'"))
        .collect();
    update_jobs(db, ids, &set.join(", ")).await;
}

/// Makes the jobs `ids` due `delay` from now (a PostgreSQL interval, such as `1 hour`).
pub async fn postpone(db: &Db, ids: &[i64], delay: &str) {
    update_jobs(db, ids, &format!("run_at = now() + interval '{delay}'")).await;
}

/// Gives the jobs `ids` the active dedupe key `key`, and makes them due in an hour, so that no
/// worker finishes the one holding it.
pub async fn share_active_dedupe_key(db: &Db, ids: &[i64], key: &str) {
    update_jobs(
        db,
        ids,
        &format!(
            "dedupe_key = '{key}', dedupe_scope = 'active', run_at = now() + interval '1 hour'"
        ),
    )
    .await;
}

/// Runs `UPDATE jobs_queue SET <set>` on the jobs `ids`.
async fn update_jobs(db: &Db, ids: &[i64], set: &str) {
    let statement = format!("UPDATE jobs_queue SET {set} WHERE id = ANY($1)");
    sqlx::query(&statement)
        .bind(ids)
        .execute(&db.pool)
        .await
        .unwrap_or_else(|error| panic!("{statement}: {error}"));
}

/// How many jobs are in each state, by state.
pub async fn jobs_per_state(db: &Db) -> Vec<(String, i64)> {
    sqlx::query_as("SELECT state, count(*) FROM jobs_queue GROUP BY state ORDER BY state")
        .fetch_all(&db.pool)
        .await
        .expect("jobs per state")
}

/// Writes `count` outbox rows parked after one attempt (topic `orders.paid`, error `refused`).
pub async fn park_outbox_rows(db: &Db, count: i64) {
    sqlx::query(
        "INSERT INTO jobs_outbox (topic, payload, state, attempts, last_error, parked_at)
         SELECT 'orders.paid', '{}', 'parked', 1, 'refused', now() FROM generate_series(1, $1)",
    )
    .bind(count)
    .execute(&db.pool)
    .await
    .expect("park outbox rows");
}

/// A row of `jobs_schedules` written straight to the table, as a worker keeping the schedule
/// would have left it. The times are PostgreSQL intervals before `now()`.
pub struct Schedule {
    pub name: &'static str,
    pub kind: &'static str,
    pub queue: &'static str,
    /// How it ticks, as `jobs stats` shows it (`every 1m`, `cron 0 3 * * * in UTC`).
    pub description: &'static str,
    /// Since when it is registered.
    pub registered_ago: &'static str,
    /// Since its last tick.
    pub ticked_ago: &'static str,
    /// Since its last successful job; `None`: never succeeded.
    pub succeeded_ago: Option<&'static str>,
}

impl Default for Schedule {
    /// `nightly`, of kind `resize` in queue `default`, every day, registered and ticked just now,
    /// never succeeded.
    fn default() -> Self {
        Self {
            name: "nightly",
            kind: "resize",
            queue: "default",
            description: "every 1d",
            registered_ago: "0 seconds",
            ticked_ago: "0 seconds",
            succeeded_ago: None,
        }
    }
}

impl Schedule {
    /// Writes the row (catching up with the latest missed tick only).
    pub async fn insert(&self, db: &Db) {
        sqlx::query(
            "INSERT INTO jobs_schedules (name, kind, queue, description, missed, created_at,
                                         last_tick_at, last_success_at)
             VALUES ($1, $2, $3, $4, 'latest', now() - $5::interval, now() - $6::interval,
                     now() - $7::interval)",
        )
        .bind(self.name)
        .bind(self.kind)
        .bind(self.queue)
        .bind(self.description)
        .bind(self.registered_ago)
        .bind(self.ticked_ago)
        .bind(self.succeeded_ago)
        .execute(&db.pool)
        .await
        .unwrap_or_else(|error| panic!("insert schedule {}: {error}", self.name));
    }
}

/// Reading what a run of the binary printed.
pub trait RunOutput: Sized {
    /// Asserts a clean success that printed exactly `stdout`.
    fn prints(self, stdout: &str);
    /// Asserts exit code 1, what `jobs check` returns when a threshold is crossed.
    fn failed_check(self) -> Self;
    /// The lines on stdout.
    fn lines(&self) -> Vec<&str>;
    /// The one line on stdout; asserts there is exactly one.
    fn single_line(&self) -> &str;
    /// Stdout read as JSON.
    fn json(&self) -> Value;
}

impl RunOutput for Run {
    fn prints(self, stdout: &str) {
        let run = self.success();
        assert_eq!(run.stdout, stdout, "{run:?}");
    }

    fn failed_check(self) -> Self {
        assert_eq!(self.code, 1, "{self:?}");
        self
    }

    fn lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }

    fn single_line(&self) -> &str {
        let lines = self.lines();
        assert_eq!(lines.len(), 1, "{self:?}");
        lines[0]
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|error| panic!("{error}: {self:?}"))
    }
}

/// Runs `jobs check FLAGS` and asserts that it passes: exit 0, nothing on stderr, and stdout
/// the one `ok: ` line.
pub async fn assert_check_passes(db: &Db, flags: &[&str]) {
    let args: Vec<&str> = ["check"].iter().chain(flags).copied().collect();
    let run = db.jobs(&args).await.success();
    assert!(run.single_line().starts_with("ok: "), "{run:?}");
}

/// Runs `jobs ARGS`, asserts a clean success, and reads stdout as JSON.
pub async fn json_of(db: &Db, args: &[&str]) -> Value {
    db.jobs(args).await.success().json()
}

/// Asserts that `line` starts with `start` and ends with `end`; what lies between (an age, a
/// time) varies from run to run.
pub fn assert_framed(line: &str, start: &str, end: &str) {
    assert!(
        line.starts_with(start),
        "{line:?} should start with {start:?}"
    );
    assert!(line.ends_with(end), "{line:?} should end with {end:?}");
}

/// Records a live worker (pid 4242 on host `box`, seen now) serving `queues` 4 at a time and
/// running `kinds`, as a worker process records itself.
pub async fn live_worker(db: &Db, queues: &[&str], kinds: &[&str]) {
    let queues: Vec<Value> = queues
        .iter()
        .map(|queue| serde_json::json!({"queue": queue, "concurrency": 4}))
        .collect();
    sqlx::query(
        "INSERT INTO jobs_workers (id, host, pid, version, queues, kinds, started_at, gone_after)
         VALUES (gen_random_uuid(), 'box', 4242, '0.1.0', $1, $2, now() - interval '1 hour',
                 interval '15 seconds')",
    )
    .bind(Value::from(queues))
    .bind(
        kinds
            .iter()
            .map(|kind| (*kind).to_owned())
            .collect::<Vec<_>>(),
    )
    .execute(&db.pool)
    .await
    .expect("record a live worker");
}
