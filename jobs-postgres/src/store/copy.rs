//! Writing many jobs alike by `COPY`: their ids reserved first, so that they come back in input
//! order, then the rows streamed in PostgreSQL's text format.
//!
//! `COPY` writes rows page by page where a multi-row `INSERT` writes them one by one, but it
//! returns nothing and cannot skip dedupe conflicts: it is used for jobs of one shape (see
//! [`same_shape`](super::enqueue::same_shape)), which carry no dedupe key, ready at once. The
//! statements run in a transaction the caller opened, on a connection the caller closes unless
//! they completed: an interrupted `COPY` leaves sqlx's connection out of step with the server
//! (the crate's `bulk_copy` module owns such connections).

use std::fmt::Write as _;

use jobs_core::{JobId, NewJob, RunAt};
use sqlx::PgConnection;

use super::enqueue::max_attempts_param;

/// Reserves `$1` job ids from the queue's id sequence, in increasing order, for jobs ready at
/// once in queue `$2`, and announces the queue when a worker watches it, with the filter
/// [`INSERT_JOBS`](super::enqueue::INSERT_JOBS) describes: when none does, the transaction holds
/// the queue's watch lock in share mode until it ends, as an insert would.
///
/// `OFFSET 0` keeps the sequence's lookup from being pulled up into the array's subquery, where
/// PostgreSQL would run it again for every id (ten times the cost of the ids themselves).
///
/// `nextval` needs `USAGE` on the sequence, which an insert relying on the column's default does
/// not: a role without it is refused here, before anything is written.
pub const RESERVE_JOB_IDS: &str = concat!(
    "
SELECT ARRAY(SELECT nextval(sequence.id) FROM generate_series(1, $1)) AS ids
FROM (SELECT pg_get_serial_sequence('jobs_queue', 'id')::regclass AS id OFFSET 0) AS sequence
WHERE (SELECT count(*) FROM (
           SELECT pg_notify('jobs_queue', $2)
           WHERE ",
    watched!("$2"),
    "
       ) AS announced) >= 0"
);

/// Writes the rows that `copy_uniform_jobs` encodes. The columns it leaves out take their defaults: a
/// `ready` job with no attempts, no keys and no batch, due at the transaction's start (as an
/// insert of a job ready at once writes it).
pub const COPY_JOBS: &str =
    "COPY jobs_queue (id, kind, queue, payload, priority, max_attempts) FROM STDIN";

/// Rows per message of a `COPY`: the rows are encoded a message at a time, so that PostgreSQL
/// reads one message while the next is encoded, and a large bulk is never held as text whole.
const ROWS_PER_MESSAGE: usize = 500;

/// Writes `jobs`, shaped like `shape` and ready at once, with ids reserved by
/// [`RESERVE_JOB_IDS`] and rows sent by [`COPY_JOBS`], in the transaction open on `conn`.
/// Returns their ids, growing in input order.
///
/// The caller must close `conn` if this future is dropped before it completes: sqlx 0.8 does
/// not count the replies an interrupted `COPY` still owes, so the connection's next statement
/// would read them.
pub(crate) async fn copy_uniform_jobs(
    conn: &mut PgConnection,
    shape: &NewJob,
    jobs: &[NewJob],
) -> Result<Vec<JobId>, sqlx::Error> {
    debug_assert_eq!(shape.run_at, RunAt::Now, "COPY writes jobs ready at once");
    let count = i32::try_from(jobs.len())
        .map_err(|_| sqlx::Error::Protocol("too many jobs for one COPY".into()))?;
    let mut ids: Vec<JobId> = sqlx::query_scalar(RESERVE_JOB_IDS)
        .bind(count)
        .bind(&shape.queue)
        .fetch_one(&mut *conn)
        .await?;
    if ids.len() != jobs.len() {
        return Err(sqlx::Error::Protocol(
            "the id sequence returned fewer ids than jobs".into(),
        ));
    }
    ids.sort_unstable();
    let mut copy = conn.copy_in_raw(COPY_JOBS).await?;
    for (ids, jobs) in ids
        .chunks(ROWS_PER_MESSAGE)
        .zip(jobs.chunks(ROWS_PER_MESSAGE))
    {
        copy.send(copy_rows(ids, shape, jobs)).await?;
    }
    copy.finish().await?;
    Ok(ids)
}

/// The rows of [`COPY_JOBS`] for `jobs` with `ids`, in PostgreSQL's text format: one line per
/// job, tab-separated, each field escaped (see [`push_field`]).
fn copy_rows(ids: &[JobId], shape: &NewJob, jobs: &[NewJob]) -> Vec<u8> {
    // The values every row shares, escaped once: kind and queue before the payload, priority
    // and max attempts after it.
    let mut before_payload = String::new();
    push_field(&mut before_payload, shape.kind);
    before_payload.push('\t');
    push_field(&mut before_payload, &shape.queue);
    before_payload.push('\t');
    let after_payload = format!("\t{}\t{}\n", shape.priority, max_attempts_param(shape));

    let mut rows = String::with_capacity(jobs.len() * (before_payload.len() + 64));
    let mut payload = String::new();
    for (id, job) in ids.iter().zip(jobs) {
        write!(rows, "{id}\t").expect("writing to a String cannot fail");
        rows.push_str(&before_payload);
        payload.clear();
        // A `serde_json::Value` displays as its compact JSON text: the jsonb input.
        write!(payload, "{}", job.payload).expect("writing to a String cannot fail");
        push_field(&mut rows, &payload);
        rows.push_str(&after_payload);
    }
    rows.into_bytes()
}

/// Appends `value` as one field of `COPY`'s text format: a backslash, tab, newline or carriage
/// return would end or change the field, so each is written as its backslash escape. (U+0000,
/// which the format cannot carry, is refused by [`NewJob::check`] before any write.)
fn push_field(out: &mut String, value: &str) {
    for character in value.chars() {
        match character {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            other => out.push(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_that_would_end_or_change_a_row_are_escaped() {
        let mut out = String::new();
        push_field(&mut out, "a\\b\tc\nd\re");
        assert_eq!(out, "a\\\\b\\tc\\nd\\re");
    }
}
