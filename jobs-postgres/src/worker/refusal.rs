//! Errors the database answers for what a statement says (a refusal), as opposed to errors in
//! reaching it; and writing many rows so that one row the database refuses holds back no other.
//!
//! The completer (outcomes) and the rescuer (expired leases) both write many rows per statement,
//! and both fall back to one row at a time when the database refuses the statement: a row it
//! refuses on its own is then set aside by the caller, loudly, and the others are written.

use std::future::Future;

/// SQLSTATE classes worth retrying: connection errors (08), a rollback such as a deadlock or a
/// serialization failure (40), insufficient resources such as too many connections (53), a
/// shutdown or restart (57), a system error (58).
const RETRYABLE_CLASSES: [&str; 5] = ["08", "40", "53", "57", "58"];

/// SQLSTATEs worth retrying outside those classes: the database is read-only for now
/// (`25006`, `read_only_sql_transaction`: a primary demoted, or a standby answering during a
/// failover), a lock was not granted in time (`55P03`, `lock_not_available`, under
/// `lock_timeout`), the session was ended for sitting idle in a transaction (`25P03`,
/// `idle_in_transaction_session_timeout`). Each says nothing about the rows written.
const RETRYABLE_CODES: [&str; 3] = ["25006", "55P03", "25P03"];

/// Whether an error with SQLSTATE `code` is about reaching the database rather than about what
/// the statement says, so that the same statement may succeed later.
pub(crate) fn is_retryable_sqlstate(code: &str) -> bool {
    RETRYABLE_CLASSES
        .iter()
        .any(|class| code.starts_with(class))
        || RETRYABLE_CODES.contains(&code)
}

/// Whether the database refused the statement for what it says (bad data, a constraint, a
/// trigger), as opposed to an error in reaching it, worth retrying (see
/// [`is_retryable_sqlstate`]; every error that is not the server's answer, such as I/O, TLS,
/// protocol errors and pool timeouts, is one of reach too).
pub(crate) fn is_refusal(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(error) => !error
            .code()
            .is_some_and(|code| is_retryable_sqlstate(&code)),
        sqlx::Error::Encode(_) | sqlx::Error::TypeNotFound { .. } => true,
        _ => false,
    }
}

/// What [`batch_then_one_by_one`] and [`one_by_one`] did: what the writes returned, and the
/// items the database refused on their own, with its answer.
pub(crate) struct Written<T, R> {
    /// What the writes that went through returned.
    pub(crate) written: Vec<R>,
    /// The items refused on their own.
    pub(crate) refused: Vec<(T, sqlx::Error)>,
}

/// Writes `items` in one call of `write`; when the database refuses that call, writes them one
/// at a time (see [`one_by_one`]). `write` returns what it wrote, or, refused, the items it was
/// given with the error; it deals with errors of reach itself. `what` names the items in logs.
pub(crate) async fn batch_then_one_by_one<T, R, F, Fut>(
    items: Vec<T>,
    what: &'static str,
    mut write: F,
) -> Written<T, R>
where
    F: FnMut(Vec<T>) -> Fut,
    Fut: Future<Output = Result<Vec<R>, (Vec<T>, sqlx::Error)>>,
{
    match write(items).await {
        Ok(written) => Written {
            written,
            refused: Vec::new(),
        },
        Err((items, error)) if items.len() == 1 => Written {
            written: Vec::new(),
            refused: items.into_iter().zip([error]).collect(),
        },
        Err((items, error)) => {
            tracing::warn!(%error, what, count = items.len(), "the database refused a batch; writing it one by one");
            one_by_one(items, write).await
        }
    }
}

/// Writes `items` one at a time with `write` (see [`batch_then_one_by_one`]), so that an item
/// the database refuses holds back no other.
pub(crate) async fn one_by_one<T, R, F, Fut>(items: Vec<T>, mut write: F) -> Written<T, R>
where
    F: FnMut(Vec<T>) -> Fut,
    Fut: Future<Output = Result<Vec<R>, (Vec<T>, sqlx::Error)>>,
{
    let mut done = Written {
        written: Vec::new(),
        refused: Vec::new(),
    };
    for item in items {
        match write(vec![item]).await {
            Ok(written) => done.written.extend(written),
            Err((alone, error)) => done.refused.extend(alone.into_iter().zip([error])),
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failover_lock_and_idle_timeouts_are_retried() {
        for code in ["25006", "55P03", "25P03"] {
            assert!(is_retryable_sqlstate(code), "{code}");
        }
    }

    #[test]
    fn errors_of_reach_are_retried() {
        for code in [
            "08006", "40001", "40P01", "53300", "57P01", "57P03", "58030",
        ] {
            assert!(is_retryable_sqlstate(code), "{code}");
        }
    }

    #[test]
    fn refusals_for_what_a_statement_says_are_not_retried() {
        // Check, not-null and unique violations, value too long, bad text, raised by a
        // trigger, other SQLSTATEs of classes 25 and 55.
        for code in [
            "23514", "23502", "23505", "22001", "22021", "P0001", "25001", "55000",
        ] {
            assert!(!is_retryable_sqlstate(code), "{code}");
        }
    }

    fn refuse_odd(items: Vec<u32>) -> Result<Vec<u32>, (Vec<u32>, sqlx::Error)> {
        if items.iter().any(|item| item % 2 == 1) {
            Err((items, sqlx::Error::Protocol(String::from("refused"))))
        } else {
            Ok(items)
        }
    }

    #[tokio::test]
    async fn one_refused_item_holds_back_no_other() {
        let mut calls = 0;
        let done = batch_then_one_by_one(vec![2, 3, 4], "numbers", |items| {
            calls += 1;
            std::future::ready(refuse_odd(items))
        })
        .await;
        assert_eq!(done.written, [2, 4]);
        assert_eq!(
            done.refused
                .iter()
                .map(|(item, _)| *item)
                .collect::<Vec<_>>(),
            [3]
        );
        assert_eq!(calls, 4, "the batch, then each item alone");
    }

    #[tokio::test]
    async fn a_batch_written_at_once_is_written_once() {
        let mut calls = 0;
        let done = batch_then_one_by_one(vec![2, 4], "numbers", |items| {
            calls += 1;
            std::future::ready(refuse_odd(items))
        })
        .await;
        assert_eq!(done.written, [2, 4]);
        assert!(done.refused.is_empty());
        assert_eq!(calls, 1);
    }
}
