//! Job rows in any state, written straight to `jobs_queue`: the fixtures of tests that look at
//! what operators see (stats, dead letters, retention), typed with durations instead of SQL.

use std::time::Duration;

use sqlx::PgPool;

/// The state a [`JobRow`] is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowState {
    /// Waiting for other jobs (as a dependent whose prerequisites have not ended: no dependency
    /// rows are written); attempts 0.
    Waiting,
    /// Waiting to run; attempts 0.
    Ready,
    /// Claimed, with a lease token and a lease; attempts 1.
    Running,
    /// Failed for good; attempts 1.
    Dead,
    /// Completed; attempts 1.
    Done,
    /// Cancelled; attempts 1.
    Cancelled,
}

impl RowState {
    fn as_str(self) -> &'static str {
        match self {
            RowState::Waiting => "waiting",
            RowState::Ready => "ready",
            RowState::Running => "running",
            RowState::Dead => "dead",
            RowState::Done => "done",
            RowState::Cancelled => "cancelled",
        }
    }
}

/// Rows of one kind to write: `count` alike, by default one ready job of kind `kind` in queue
/// `default`, due now, with 8 attempts and no error history. Times are offsets from the
/// database's `now()`.
#[derive(Debug, Clone)]
#[must_use = "nothing is written until `.insert(pool)` is awaited"]
pub struct JobRow {
    kind: String,
    queue: String,
    state: RowState,
    count: i64,
    /// Attempts allowed in all.
    max_attempts: i32,
    /// Seconds from now until due (negative: due that long ago).
    due_in_secs: f64,
    /// For running rows: seconds from now until the lease expires (negative: expired).
    lease_left_secs: f64,
    /// For finished rows: seconds since they finished.
    finished_ago_secs: f64,
    /// The dedupe key and its scope; with `count` above 1, each row's key gets `-<n>`.
    dedupe: Option<(String, String)>,
    /// The error history, a JSON array.
    errors: serde_json::Value,
}

impl JobRow {
    /// One ready job of `kind` in queue `default`, due now.
    pub fn new(kind: &str) -> Self {
        Self {
            kind: kind.to_owned(),
            queue: String::from("default"),
            state: RowState::Ready,
            count: 1,
            max_attempts: 8,
            due_in_secs: 0.0,
            lease_left_secs: 30.0,
            finished_ago_secs: 0.0,
            dedupe: None,
            errors: serde_json::json!([]),
        }
    }

    /// In queue `queue`.
    pub fn queue(mut self, queue: &str) -> Self {
        self.queue = queue.to_owned();
        self
    }

    /// In state `state`.
    pub fn state(mut self, state: RowState) -> Self {
        self.state = state;
        self
    }

    /// `count` rows alike.
    pub fn count(mut self, count: i64) -> Self {
        self.count = count;
        self
    }

    /// With `max_attempts` attempts allowed in all (8 unless said).
    pub fn max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Due `delay` from now.
    pub fn due_in(mut self, delay: Duration) -> Self {
        self.due_in_secs = delay.as_secs_f64();
        self
    }

    /// Due since `age` ago.
    pub fn due_for(mut self, age: Duration) -> Self {
        self.due_in_secs = -age.as_secs_f64();
        self
    }

    /// For a running row: its lease expired `age` ago.
    pub fn lease_expired_for(mut self, age: Duration) -> Self {
        self.lease_left_secs = -age.as_secs_f64();
        self
    }

    /// For a finished row: finished `age` ago.
    pub fn finished_ago(mut self, age: Duration) -> Self {
        self.finished_ago_secs = age.as_secs_f64();
        self
    }

    /// Holding dedupe key `key` in `scope` (`active` or `retained`).
    pub fn dedupe(mut self, key: &str, scope: &str) -> Self {
        self.dedupe = Some((key.to_owned(), scope.to_owned()));
        self
    }

    /// With the error history `errors`, a JSON array of attempt records.
    pub fn errors(mut self, errors: serde_json::Value) -> Self {
        self.errors = errors;
        self
    }

    /// With the error history `errors`, a JSON array of attempt records as text.
    pub fn errors_json(self, errors: &str) -> Self {
        self.errors(serde_json::from_str(errors).expect("an error history in JSON"))
    }

    /// Writes the rows; returns their ids in order.
    pub async fn insert(self, pool: &PgPool) -> Vec<i64> {
        let (key, scope) = self.dedupe.unzip();
        let mut ids: Vec<i64> = sqlx::query_scalar(
            "INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, run_at,
                                     lease_token, lease_expires_at, finished_at,
                                     dedupe_key, dedupe_scope, errors)
             SELECT $1, $2, jsonb_build_object('n', n), $3,
                    CASE WHEN $3 IN ('ready', 'waiting') THEN 0 ELSE 1 END, $11,
                    now() + make_interval(secs => $4),
                    CASE WHEN $3 = 'running' THEN gen_random_uuid() END,
                    CASE WHEN $3 = 'running' THEN now() + make_interval(secs => $5) END,
                    CASE WHEN $3 IN ('done', 'dead', 'cancelled')
                         THEN now() - make_interval(secs => $6) END,
                    CASE WHEN $7::text IS NULL THEN NULL
                         WHEN $9 = 1 THEN $7 ELSE $7 || '-' || n END,
                    $8, $10
             FROM generate_series(1, $9) AS n
             ORDER BY n
             RETURNING id",
        )
        .bind(&self.kind)
        .bind(&self.queue)
        .bind(self.state.as_str())
        .bind(self.due_in_secs)
        .bind(self.lease_left_secs)
        .bind(self.finished_ago_secs)
        .bind(key)
        .bind(scope)
        .bind(self.count)
        .bind(sqlx::types::Json(&self.errors))
        .bind(self.max_attempts)
        .fetch_all(pool)
        .await
        .expect("insert job rows");
        ids.sort_unstable();
        ids
    }
}

/// `n` minutes.
pub fn minutes(n: u64) -> Duration {
    Duration::from_secs(n * 60)
}

/// `n` hours.
pub fn hours(n: u64) -> Duration {
    Duration::from_secs(n * 3_600)
}

/// `n` days.
pub fn days(n: u64) -> Duration {
    Duration::from_secs(n * 86_400)
}
