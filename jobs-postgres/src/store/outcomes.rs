//! Writing what runs ended with, fenced by their lease tokens, and extending the leases of
//! runs still going.

use std::collections::HashSet;
use std::time::Duration;

use jobs_core::{Decision, EncodedOutput, JobId};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// The state a run's outcome `o.state` leaves job `j` in: `cancelled` when the job was asked to
/// stop and the run did not succeed, else the outcome's.
macro_rules! outcome_state {
    () => {
        "CASE WHEN o.state <> 'done' AND j.cancel_requested_at IS NOT NULL THEN 'cancelled' \
              ELSE o.state END"
    };
}

/// Records the outcomes of many runs in one statement, each fenced by its lease token.
///
/// Arrays, one element per run: `$1` ids, `$2` lease tokens, `$3` new states (`done`, `ready`,
/// `dead`, `cancelled`), `$4` seconds until the job is ready again (for `ready`; NULL keeps its
/// `run_at`, for a job handed back before its run started), `$5` whether
/// the attempt is given back (snooze, hand-back at shutdown), `$6` error kinds and `$7` error
/// messages (NULL when there is no error to keep), `$8` outputs as JSON text (NULL but for runs
/// ending `done` with an output; the column is set from it, so it is NULL in every other
/// state). Returns the `(id, lease_token)` of the runs whose lease still held (a worker may hold
/// two runs of one job, the stale one under a lost token): the others were taken by another
/// worker or a rescue, and nothing was written for them. A job of a schedule that is now done
/// records the schedule's success.
///
/// A job asked to stop (`cancel_requested_at` set, see `store::cancel`) whose run did not
/// succeed is `cancelled` instead of being retried, snoozed, handed back or made dead; its
/// error, if any, is kept in its history as usual.
///
/// Planned once per connection: each array is read through a scalar subquery, so that the plan
/// cannot depend on the arrays' contents, and PostgreSQL keeps its generic plan for the prepared
/// statement after the first five executions. With the arrays as plain parameters it planned the
/// statement again at every execution (the length of each array changes the row estimates), and
/// planning cost about three times what executing the statement for one job does.
///
/// The jobs that end here with dependents or in a batch move their workflows on in the same
/// statement ([`workflow_steps!`]): members counted once per chunk of their batch, dependents
/// released or cancelled. For outcomes of plain jobs that step reads the rows written and
/// calls nothing.
pub const RECORD_OUTCOMES: &str = concat!(
    "
WITH recorded AS (
UPDATE jobs_queue AS j
SET state = ",
    outcome_state!(),
    ",
    run_at = CASE WHEN ",
    outcome_state!(),
    " = 'ready' THEN coalesce(now() + make_interval(secs => o.delay_secs), j.run_at)
                ELSE j.run_at END,
    attempts = CASE WHEN o.give_back_attempt THEN j.attempts - 1 ELSE j.attempts END,
    finished_at = CASE WHEN ",
    outcome_state!(),
    " = 'ready' THEN NULL ELSE now() END,
    lease_token = NULL,
    lease_expires_at = NULL,
    output = o.output::jsonb,
    errors = CASE WHEN o.error_kind IS NULL THEN j.errors
                  ELSE j.errors || jsonb_build_array(jsonb_build_object(
                      'attempt', j.attempts, 'at', now(), 'kind', o.error_kind, 'error', o.error))
             END
FROM unnest((SELECT $1::bigint[]), (SELECT $2::uuid[]), (SELECT $3::text[]), (SELECT $4::float8[]),
            (SELECT $5::bool[]), (SELECT $6::text[]), (SELECT $7::text[]), (SELECT $8::text[]))
     AS o(id, lease_token, state, delay_secs, give_back_attempt, error_kind, error, output)
WHERE j.id = o.id AND j.lease_token = o.lease_token
RETURNING j.id, o.lease_token, j.state, j.schedule, j.batch_id, j.has_dependents
), schedule_succeeded AS (
    UPDATE jobs_schedules AS s SET last_success_at = now()
    WHERE s.name IN (SELECT schedule FROM recorded WHERE state = 'done' AND schedule IS NOT NULL)
), ",
    workflow_steps!("recorded", "'running'::text"),
    "
SELECT id, lease_token FROM recorded
WHERE ",
    after_workflow_steps!()
);

/// Extends the leases of jobs `$1` still held with tokens `$2`, each by its `$3` seconds (the
/// three arrays pair up); returns the `(id, lease_token)` of the runs whose lease still holds,
/// each with whether the job was asked to stop (`cancel_requested`). Planned once per
/// connection, as [`RECORD_OUTCOMES`] is.
pub const HEARTBEAT: &str = "
UPDATE jobs_queue AS j
SET lease_expires_at = now() + make_interval(secs => held.lease_secs)
FROM unnest((SELECT $1::bigint[]), (SELECT $2::uuid[]), (SELECT $3::float8[]))
     AS held(id, lease_token, lease_secs)
WHERE j.id = held.id AND j.lease_token = held.lease_token
RETURNING j.id, j.lease_token, j.cancel_requested_at IS NOT NULL AS cancel_requested";

/// Marks job `$1` done inside the job's own transaction, fenced by its lease token `$2`, storing
/// output `$3` (JSON text; NULL for none); returns its id when the lease still held. The row
/// stays locked until that transaction ends, so the completion commits or rolls back with the
/// job's effects, and so does the step of its workflow ([`workflow_steps!`]).
pub const COMPLETE_IN_TRANSACTION: &str = concat!(
    "
WITH completed AS (
    UPDATE jobs_queue
    SET state = 'done',
        finished_at = now(),
        lease_token = NULL,
        lease_expires_at = NULL,
        output = $3::text::jsonb
    WHERE id = $1 AND lease_token = $2 AND state = 'running'
    RETURNING id, schedule, state, batch_id, has_dependents
), schedule_succeeded AS (
    UPDATE jobs_schedules AS s SET last_success_at = now()
    WHERE s.name IN (SELECT schedule FROM completed WHERE schedule IS NOT NULL)
), ",
    workflow_steps!("completed", "'running'::text"),
    "
SELECT id FROM completed
WHERE ",
    after_workflow_steps!()
);

/// Whether an outcome was written, or the lease had already been lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// The write happened: the lease still held the job.
    Written,
    /// Nothing was written: another claim or a rescue had taken the job.
    LeaseLost,
}

/// The outcome of one run, ready to be written.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The job's id.
    pub id: JobId,
    /// The lease token of the claim that ran it.
    pub lease_token: Uuid,
    /// What to do with the job.
    pub decision: Decision,
    /// Whether the run never started: the job was claimed ahead of a free slot and is handed
    /// back. The decision is then a snooze of no delay, and the job keeps its place in the
    /// claim order (its `run_at`) instead of going behind the jobs that became due meanwhile.
    pub unstarted: bool,
}

impl Outcome {
    /// The outcome of run `(id, lease_token)` that ended with `decision`.
    pub fn of_run(id: JobId, lease_token: Uuid, decision: Decision) -> Self {
        Self {
            id,
            lease_token,
            decision,
            unstarted: false,
        }
    }

    /// Hands back job `id`, claimed under `lease_token` but never started: the attempt is given
    /// back and the job keeps its place in the claim order.
    pub fn unstarted(id: JobId, lease_token: Uuid) -> Self {
        Self {
            id,
            lease_token,
            decision: Decision::Snooze {
                delay: Duration::ZERO,
            },
            unstarted: true,
        }
    }
}

/// The columns of [`RECORD_OUTCOMES`], one element per outcome, in the order of job ids.
///
/// Rows are locked in the order of the ids bound: the statement's join drives from the arrays,
/// looking each id up in the primary key. Binding every batch in id order (here, and for the
/// heartbeat in [`lease_columns`]) means two statements of any workers lock their common rows
/// in the same order, so they cannot deadlock. Sorting a few hundred ids in the process costs
/// nothing next to a statement; a locking subquery with `ORDER BY id FOR UPDATE` would cost a
/// second pass over the rows in every statement.
#[derive(Debug, Default, PartialEq)]
struct OutcomeColumns<'a> {
    ids: Vec<JobId>,
    tokens: Vec<Uuid>,
    states: Vec<&'static str>,
    delays: Vec<Option<f64>>,
    give_backs: Vec<bool>,
    error_kinds: Vec<Option<&'static str>>,
    errors: Vec<Option<&'a str>>,
    outputs: Vec<Option<&'a str>>,
}

impl<'a> OutcomeColumns<'a> {
    fn of(outcomes: &'a [Outcome]) -> Self {
        let mut sorted: Vec<&Outcome> = outcomes.iter().collect();
        sorted.sort_by_key(|outcome| outcome.id);
        let mut columns = Self::default();
        for outcome in sorted {
            let output = match &outcome.decision {
                Decision::Complete { output } => output.as_ref().map(EncodedOutput::as_json),
                _ => None,
            };
            let (state, delay, give_back, error_kind, error) = match &outcome.decision {
                Decision::Complete { .. } => ("done", Duration::ZERO, false, None, None),
                Decision::Retry { delay, error } => (
                    "ready",
                    *delay,
                    false,
                    Some(error.kind),
                    Some(error.message.as_str()),
                ),
                Decision::Dead { error } => (
                    "dead",
                    Duration::ZERO,
                    false,
                    Some(error.kind),
                    Some(error.message.as_str()),
                ),
                Decision::Snooze { delay } => ("ready", *delay, true, None, None),
                Decision::Cancel { reason } => (
                    "cancelled",
                    Duration::ZERO,
                    false,
                    Some("cancelled"),
                    Some(reason.as_str()),
                ),
            };
            columns.ids.push(outcome.id);
            columns.tokens.push(outcome.lease_token);
            columns.states.push(state);
            columns
                .delays
                .push((!outcome.unstarted).then_some(delay.as_secs_f64()));
            columns.give_backs.push(give_back);
            columns.error_kinds.push(error_kind);
            columns.errors.push(error);
            columns.outputs.push(output);
        }
        columns
    }
}

/// Writes many outcomes in one statement; returns, per outcome in order, whether its lease
/// still held (and so whether it was written). Rows are locked in id order (see
/// [`OutcomeColumns`]).
pub async fn record_outcomes(
    executor: impl sqlx::PgExecutor<'_>,
    outcomes: &[Outcome],
) -> Result<Vec<Fenced>, sqlx::Error> {
    let columns = OutcomeColumns::of(outcomes);
    let written: Vec<(JobId, Uuid)> = sqlx::query_as(RECORD_OUTCOMES)
        .bind(&columns.ids)
        .bind(&columns.tokens)
        .bind(&columns.states)
        .bind(&columns.delays)
        .bind(&columns.give_backs)
        .bind(&columns.error_kinds)
        .bind(&columns.errors)
        .bind(&columns.outputs)
        .fetch_all(executor)
        .await?;
    let written: HashSet<(JobId, Uuid)> = written.into_iter().collect();
    Ok(outcomes
        .iter()
        .map(|outcome| {
            if written.contains(&(outcome.id, outcome.lease_token)) {
                Fenced::Written
            } else {
                Fenced::LeaseLost
            }
        })
        .collect())
}

/// The columns of [`HEARTBEAT`] for runs `(id, token, lease)`, in the order of job ids, so
/// that rows are locked in id order (see [`OutcomeColumns`]).
fn lease_columns(held: &[(JobId, Uuid, Duration)]) -> (Vec<JobId>, Vec<Uuid>, Vec<f64>) {
    let mut sorted = held.to_vec();
    sorted.sort_by_key(|(id, _, _)| *id);
    let ids = sorted.iter().map(|(id, _, _)| *id).collect();
    let tokens = sorted.iter().map(|(_, token, _)| *token).collect();
    let leases = sorted
        .iter()
        .map(|(_, _, lease)| lease.as_secs_f64())
        .collect();
    (ids, tokens, leases)
}

/// A run whose lease a heartbeat renewed, as [`HEARTBEAT`] returns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct RenewedLease {
    /// The job's id.
    pub id: JobId,
    /// The run's lease token.
    pub lease_token: Uuid,
    /// Whether the job was asked to stop: its run is told (`ctx.cancel_requested()`).
    pub cancel_requested: bool,
}

impl RenewedLease {
    /// The run, `(id, token)`.
    pub fn run(&self) -> (JobId, Uuid) {
        (self.id, self.lease_token)
    }
}

/// Extends the leases of the given runs, `(id, token, lease)`, each by its own lease; returns
/// the runs whose lease still held, with whether each job was asked to stop. Rows are locked in
/// id order.
pub async fn heartbeat(
    pool: &PgPool,
    held: &[(JobId, Uuid, Duration)],
) -> Result<Vec<RenewedLease>, sqlx::Error> {
    let (ids, tokens, leases) = lease_columns(held);
    sqlx::query_as(HEARTBEAT)
        .bind(&ids)
        .bind(&tokens)
        .bind(&leases)
        .fetch_all(pool)
        .await
}

/// Marks job `id` done in the transaction `conn` belongs to, fenced by `lease_token`, storing
/// `output`.
pub(crate) async fn complete_in_transaction(
    conn: &mut PgConnection,
    id: JobId,
    lease_token: Uuid,
    output: Option<&EncodedOutput>,
) -> Result<Fenced, sqlx::Error> {
    let completed: Option<JobId> = sqlx::query_scalar(COMPLETE_IN_TRANSACTION)
        .bind(id)
        .bind(lease_token)
        .bind(output.map(EncodedOutput::as_json))
        .fetch_optional(conn)
        .await?;
    Ok(match completed {
        Some(_) => Fenced::Written,
        None => Fenced::LeaseLost,
    })
}

#[cfg(test)]
mod tests {
    use jobs_core::AttemptError;

    use super::*;

    #[test]
    fn outcomes_are_bound_in_id_order() {
        let outcome = |id: JobId, decision: Decision| Outcome::of_run(id, Uuid::new_v4(), decision);
        let outcomes = [
            outcome(
                30,
                Decision::Complete {
                    output: jobs_core::encode_output(&"R-1").unwrap(),
                },
            ),
            outcome(
                10,
                Decision::Dead {
                    error: AttemptError {
                        kind: "permanent",
                        message: String::from("bad"),
                    },
                },
            ),
            outcome(
                20,
                Decision::Snooze {
                    delay: Duration::from_secs(2),
                },
            ),
        ];
        let columns = OutcomeColumns::of(&outcomes);
        assert_eq!(columns.ids, [10, 20, 30]);
        assert_eq!(
            columns.tokens,
            [
                outcomes[1].lease_token,
                outcomes[2].lease_token,
                outcomes[0].lease_token
            ]
        );
        assert_eq!(columns.states, ["dead", "ready", "done"]);
        assert_eq!(columns.delays, [Some(0.0), Some(2.0), Some(0.0)]);
        assert_eq!(columns.give_backs, [false, true, false]);
        assert_eq!(columns.error_kinds, [Some("permanent"), None, None]);
        assert_eq!(columns.errors, [Some("bad"), None, None]);
        assert_eq!(columns.outputs, [None, None, Some("\"R-1\"")]);
    }

    #[test]
    fn a_job_handed_back_unstarted_keeps_its_place() {
        let token = Uuid::new_v4();
        let outcomes = [Outcome::unstarted(4, token)];
        let columns = OutcomeColumns::of(&outcomes);
        assert_eq!(columns.states, ["ready"]);
        assert_eq!(columns.delays, [None]);
        assert_eq!(columns.give_backs, [true]);
        assert_eq!(columns.error_kinds, [None]);
    }

    #[test]
    fn leases_are_bound_in_id_order() {
        let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let held = [
            (9, a, Duration::from_secs(9)),
            (3, b, Duration::from_secs(3)),
            (5, c, Duration::from_secs(5)),
        ];
        let (ids, tokens, leases) = lease_columns(&held);
        assert_eq!(ids, [3, 5, 9]);
        assert_eq!(tokens, [b, c, a]);
        assert_eq!(leases, [3.0, 5.0, 9.0]);
    }
}
