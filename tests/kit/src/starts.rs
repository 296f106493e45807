//! The start times of jobs, as the rows hold them (`attempted_at`): what tests of rate limits
//! count per window.

use std::time::Duration;

use sqlx::PgPool;

/// The most jobs of `kind` started in any window of `window`, by the rows' start times: for each
/// job's start, the jobs started from then (included) until `window` later (excluded).
pub async fn most_started_in_any_window(
    pool: &PgPool,
    kind: &str,
    window: Duration,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT coalesce(max(started), 0) FROM (
             SELECT count(*) AS started
             FROM jobs_queue AS first JOIN jobs_queue AS later
               ON later.kind = first.kind
              AND later.attempted_at >= first.attempted_at
              AND later.attempted_at < first.attempted_at + make_interval(secs => $2)
             WHERE first.kind = $1
             GROUP BY first.id) AS windows",
    )
    .bind(kind)
    .bind(window.as_secs_f64())
    .fetch_one(pool)
    .await
}

/// The jobs of `kind` started per second after the first `first_window` of them, from the
/// first start to the last: the pace a rate limit let the rest start at.
pub async fn pace_after_first_window(
    pool: &PgPool,
    kind: &str,
    first_window: i64,
) -> Result<f64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT (count(*) - $2)::float8
                / nullif(extract(epoch FROM max(attempted_at) - min(attempted_at)), 0)::float8
         FROM jobs_queue WHERE kind = $1",
    )
    .bind(kind)
    .bind(first_window)
    .fetch_one(pool)
    .await
}
