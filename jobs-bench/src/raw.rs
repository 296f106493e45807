//! The raw-SQL ceilings: the leanest statements that do the same work as the framework, with no
//! framework around them, through the same driver.

use sqlx::{PgConnection, PgPool};

/// One plain insert of a job row, as a hand-written queue would do it.
pub const INSERT_ONE: &str =
    "INSERT INTO jobs_queue (kind, queue, payload, max_attempts) VALUES ('noop', 'default', $1, 8)";

/// Claims up to `$1` ready jobs, leasing them. Like the framework's claim, it commits without
/// waiting for its WAL flush (a claim lost in a database crash only makes a job run again), so
/// that the ratio measures the framework and not a durability choice.
pub const CLAIM: &str = "
UPDATE jobs_queue
SET state = 'running', attempts = attempts + 1, lease_token = gen_random_uuid(),
    lease_expires_at = now() + interval '30 seconds'
WHERE id IN (
    SELECT id FROM jobs_queue
    WHERE state = 'ready' AND queue = 'default' AND run_at <= now()
      AND (SELECT set_config('synchronous_commit', 'off', true)) = 'off'
    ORDER BY priority DESC, run_at, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
RETURNING id";

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

/// One drain loop: claim up to `batch`, mark them done, until nothing is left. Returns how many
/// jobs it completed.
pub async fn drain_loop(pool: PgPool, batch: i64) -> Result<u64, sqlx::Error> {
    let mut completed = 0;
    loop {
        let ids: Vec<i64> = sqlx::query_scalar(CLAIM)
            .bind(batch)
            .fetch_all(&pool)
            .await?;
        if ids.is_empty() {
            return Ok(completed);
        }
        sqlx::query(MARK_DONE).bind(&ids).execute(&pool).await?;
        completed += ids.len() as u64;
    }
}
