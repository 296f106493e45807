//! The raw-SQL ceilings: the leanest statements that do the same work as the framework, with no
//! framework around them, through the same driver.

use sqlx::{PgConnection, PgPool};

use crate::pgbench;

/// The business row each measured enqueue transaction writes beside its job.
pub const INSERT_BUSINESS_ROW: &str = "INSERT INTO business (note) VALUES ('order')";

/// One plain insert of a job row, as a hand-written queue would do it.
pub const INSERT_ONE: &str =
    "INSERT INTO jobs_queue (kind, queue, payload, max_attempts) VALUES ('noop', 'default', $1, 8)";

/// [`INSERT_ONE`] and an announcement on the framework's channel, in one statement. A notifying
/// transaction holds a cluster-wide lock from just before its commit until the commit is on disk
/// (so that notifications are queued in commit order), which keeps notifying commits from sharing
/// a WAL flush.
pub const INSERT_ONE_AND_NOTIFY: &str = "
INSERT INTO jobs_queue (kind, queue, payload, max_attempts)
SELECT 'noop', 'default', $1, 8
WHERE (SELECT count(*) FROM (SELECT pg_notify('jobs_queue', 'default')) AS announced) >= 0";

/// A raw claim of up to `$1` ready jobs of one kind in one queue (the ready index leads with
/// both), leasing them and returning `$returning`.
/// Like the framework's claim, it commits without waiting for its WAL flush (a claim lost in a
/// database crash only makes a job run again), so that the ratios measure the framework and not
/// a durability choice.
macro_rules! claim {
    ($queue:literal, $kind:literal, $returning:literal) => {
        concat!(
            "
UPDATE jobs_queue
SET state = 'running', attempts = attempts + 1, lease_token = gen_random_uuid(),
    lease_expires_at = now() + interval '30 seconds'
WHERE id IN (
    SELECT id FROM jobs_queue
    WHERE state = 'ready' AND queue = '",
            $queue,
            "' AND kind = '",
            $kind,
            "' AND run_at <= now()
      AND (SELECT set_config('synchronous_commit', 'off', true)) = 'off'
    ORDER BY priority DESC, run_at, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
RETURNING ",
            $returning
        )
    };
}

/// Claims up to `$1` ready `noop` jobs of queue `default`, returning their ids.
pub const CLAIM: &str = claim!("default", "noop", "id");

/// Marks the given jobs done.
pub const MARK_DONE: &str = "
UPDATE jobs_queue SET state = 'done', finished_at = now(), lease_token = NULL, lease_expires_at = NULL
WHERE id = ANY($1)";

/// Inserts `rows` job rows with `COPY`: the fastest bulk path PostgreSQL has.
pub async fn copy_jobs(conn: &mut PgConnection, rows: usize) -> Result<(), sqlx::Error> {
    let mut text = String::with_capacity(rows * 40);
    for n in 0..rows {
        text.push_str("noop\tdefault\t{\"n\": ");
        text.push_str(&n.to_string());
        text.push_str("}\t8\n");
    }
    let mut copy = conn
        .copy_in_raw("COPY jobs_queue (kind, queue, payload, max_attempts) FROM STDIN")
        .await?;
    copy.send(text.as_bytes()).await?;
    copy.finish().await?;
    Ok(())
}

/// Inserts `rows` no-op jobs with one multi-row `INSERT` (arrays through `unnest`), returning
/// nothing.
pub async fn insert_jobs(conn: &mut PgConnection, rows: usize) -> Result<(), sqlx::Error> {
    let payloads: Vec<sqlx::types::Json<serde_json::Value>> = (0..rows)
        .map(|n| sqlx::types::Json(serde_json::json!({ "n": n })))
        .collect();
    sqlx::query(
        "INSERT INTO jobs_queue (kind, queue, payload, max_attempts)
         SELECT 'noop', 'default', payload, 8 FROM unnest($1::jsonb[]) AS payload",
    )
    .bind(payloads)
    .execute(conn)
    .await?;
    Ok(())
}

/// One drain loop on one connection: claim up to `batch`, mark them done, until nothing is
/// left. Returns how many jobs it completed.
pub async fn drain_loop(pool: PgPool, batch: i64) -> Result<u64, sqlx::Error> {
    // One connection for the whole loop, as a pgbench client holds its own.
    let mut conn = pool.acquire().await?;
    let mut completed = 0;
    loop {
        let ids: Vec<i64> = sqlx::query_scalar(CLAIM)
            .bind(batch)
            .fetch_all(&mut *conn)
            .await?;
        if ids.is_empty() {
            return Ok(completed);
        }
        sqlx::query(MARK_DONE)
            .bind(&ids)
            .execute(&mut *conn)
            .await?;
        completed += ids.len() as u64;
    }
}

/// [`drain_loop`]'s round as a pgbench script: [`CLAIM`] of up to `:batch` jobs, then
/// [`MARK_DONE`] of those claimed, each statement committed on its own.
pub fn drain_script() -> String {
    format!(
        "WITH claimed AS ({}) SELECT coalesce(array_agg(id), ARRAY[]::bigint[]) AS ids FROM claimed\n\\gset\n{};\n",
        pgbench::command(CLAIM, &["batch"]),
        pgbench::command(MARK_DONE, &["ids"]),
    )
}

/// The enqueue ceiling's transaction as a pgbench script: [`INSERT_BUSINESS_ROW`] and
/// [`INSERT_ONE`] of `:payload`, committed together.
pub fn enqueue_script() -> String {
    format!(
        "BEGIN;\n{INSERT_BUSINESS_ROW};\n{};\nCOMMIT;\n",
        pgbench::command(INSERT_ONE, &["payload"]),
    )
}

/// The channel the raw latency probe announces its jobs on.
pub const PROBE_CHANNEL: &str = "raw_probe";

/// Inserts one probe job (`$1` its sequence number) on queue `raw` and announces it, as a
/// hand-written queue would: one statement, committed on its own.
pub const INSERT_PROBE: &str = "
WITH inserted AS (
    INSERT INTO jobs_queue (kind, queue, payload, max_attempts)
    VALUES ('raw_probe', 'raw', jsonb_build_object('seq', $1::bigint), 8)
    RETURNING id
)
SELECT pg_notify('raw_probe', 'raw') FROM inserted";

/// Claims up to `$1` ready probe jobs as [`CLAIM`] claims, returning their sequence numbers.
pub const CLAIM_PROBES: &str = claim!("raw", "raw_probe", "(payload->>'seq')::bigint");

/// The leanest pickup there is: wait for a notification on a connection of its own, claim on
/// another, and note the moment each claimed probe comes back (where a handler would start).
/// Runs until `stop` is set.
pub async fn pickup_loop(
    pool: PgPool,
    starts: std::sync::Arc<crate::kinds::StartTimes>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), sqlx::Error> {
    let mut listener = sqlx::postgres::PgListener::connect_with(&pool).await?;
    listener.listen(PROBE_CHANNEL).await?;
    let mut claimer = pool.acquire().await?.detach();
    let mut stop = stop;
    loop {
        tokio::select! {
            notification = listener.recv() => { notification?; }
            _ = stop.wait_for(|stop| *stop) => return Ok(()),
        }
        let claimed: Vec<i64> = sqlx::query_scalar(CLAIM_PROBES)
            .bind(16_i64)
            .fetch_all(&mut claimer)
            .await?;
        let now = std::time::Instant::now();
        let mut times = starts
            .times
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for seq in claimed {
            times.insert(seq, now);
        }
    }
}
