//! A factory of job rows written straight into `jobs_queue`, in any state and of any age, for
//! the tests of operating the queue: each test sets only what it is about.

use sqlx::PgPool;

/// `count` job rows alike. SQL expressions give the times, so rows can be made old without
/// waiting (`run_at: "now() - interval '10 minutes'"`).
pub struct JobRows<'a> {
    pub kind: &'a str,
    pub queue: &'a str,
    pub state: &'a str,
    pub count: i64,
    /// When the job is due.
    pub run_at: &'a str,
    /// For running rows: when the lease expires.
    pub lease_expires_at: &'a str,
    /// For done, dead and cancelled rows: when they got there.
    pub finished_at: &'a str,
    /// `(key, scope)`; the key gets `-<n>` appended when `count` is above 1.
    pub dedupe: Option<(&'a str, &'a str)>,
    /// The error history, a JSON array.
    pub errors: &'a str,
}

impl Default for JobRows<'_> {
    fn default() -> Self {
        Self {
            kind: "resize",
            queue: "default",
            state: "ready",
            count: 1,
            run_at: "now()",
            lease_expires_at: "now() + interval '30 seconds'",
            finished_at: "now()",
            dedupe: None,
            errors: "[]",
        }
    }
}

impl JobRows<'_> {
    /// Inserts the rows; returns their ids in order.
    pub async fn insert(self, pool: &PgPool) -> Vec<i64> {
        let statement = format!(
            "INSERT INTO jobs_queue (kind, queue, payload, state, attempts, max_attempts, run_at,
                                     lease_token, lease_expires_at, finished_at,
                                     dedupe_key, dedupe_scope, errors)
             SELECT $1, $2, jsonb_build_object('n', n), $3,
                    CASE WHEN $3 = 'ready' THEN 0 ELSE 1 END, 8, {run_at},
                    CASE WHEN $3 = 'running' THEN gen_random_uuid() END,
                    CASE WHEN $3 = 'running' THEN {lease} END,
                    CASE WHEN $3 IN ('done', 'dead', 'cancelled') THEN {finished} END,
                    CASE WHEN $4::text IS NULL THEN NULL
                         WHEN $6 = 1 THEN $4 ELSE $4 || '-' || n END,
                    $5, $7::jsonb
             FROM generate_series(1, $6) AS n
             ORDER BY n
             RETURNING id",
            run_at = self.run_at,
            lease = self.lease_expires_at,
            finished = self.finished_at,
        );
        let (key, scope) = self.dedupe.unzip();
        let mut ids: Vec<i64> = sqlx::query_scalar(&statement)
            .bind(self.kind)
            .bind(self.queue)
            .bind(self.state)
            .bind(key)
            .bind(scope)
            .bind(self.count)
            .bind(self.errors)
            .fetch_all(pool)
            .await
            .expect("insert job rows");
        ids.sort_unstable();
        ids
    }
}
