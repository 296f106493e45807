-- Workflow steps taken by the statements that end and re-open jobs, not by a row trigger.
--
-- Migration 15 moved workflows on with a row trigger on every change of a job's state. Even when
-- its condition is false (a job with neither dependents nor a batch), PostgreSQL fetches the
-- row's old version and evaluates the condition for every row a claim or an outcome writes: the
-- busiest writes of the queue paid for workflows they were not part of. Now each statement that
-- ends a job (an outcome, a completion in the job's own transaction, a rescue, a cancel) or
-- re-opens one (a dead-letter replay, a batch's callback run again, a dependent waiting again)
-- hands the jobs it moved that have dependents or a batch to `jobs_workflow_steps`, once, after
-- all its own writes; plain jobs hand nothing over and cost nothing.
--
-- The call comes after the statement's writes because PostgreSQL refuses a statement's update of
-- a row that a function it called has already updated: the statements call it from an
-- aggregate over the rows they wrote, which reads them all first.

DROP TRIGGER jobs_workflow_step ON jobs_queue;
DROP FUNCTION jobs_workflow_step();

-- The jobs `moved_ids` moved from states `moved_from` to states `moved_to` (one element per job
-- in each array), each with its batch (`moved_batches`, NULL for none) and whether some job
-- depends on it (`moved_dependents`). For each that ended (from waiting, ready or running to done, dead or
-- cancelled) or was re-opened (the reverse), the members are counted in their batch's chunks,
-- one update per chunk, in chunk order; then each one's dependents are released (it ended) or
-- wait for it again (it was re-opened), in id order. Jobs that neither ended nor re-opened are
-- ignored. For a job that ended, its `moved_from` may be any pending state: only a re-opened job's previous
-- end is taken back from the counts. Returns how many jobs moved.
CREATE FUNCTION jobs_workflow_steps(moved_ids bigint[], moved_batches bigint[],
                                    moved_dependents boolean[], moved_from text[],
                                    moved_to text[])
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    moved record;
    moves integer := 0;
BEGIN
    WITH ended_or_reopened AS (
        SELECT m.id, m.batch, m.was, m.became, m.became IN ('done', 'dead', 'cancelled') AS ended
        FROM unnest(moved_ids, moved_batches, moved_from, moved_to) AS m(id, batch, was, became)
        WHERE m.batch IS NOT NULL
          AND (m.was IN ('done', 'dead', 'cancelled')) <> (m.became IN ('done', 'dead', 'cancelled'))
    ), per_chunk AS (
        SELECT batch, id / 64 AS chunk,
               sum(CASE WHEN ended THEN -1 ELSE 1 END) AS pending,
               sum(CASE WHEN ended AND became = 'done' THEN 1
                        WHEN NOT ended AND was = 'done' THEN -1 ELSE 0 END) AS done,
               sum(CASE WHEN ended AND became = 'dead' THEN 1
                        WHEN NOT ended AND was = 'dead' THEN -1 ELSE 0 END) AS dead,
               sum(CASE WHEN ended AND became = 'cancelled' THEN 1
                        WHEN NOT ended AND was = 'cancelled' THEN -1 ELSE 0 END) AS cancelled
        FROM ended_or_reopened
        GROUP BY batch, id / 64
    ), locked AS (
        SELECT c.batch_id, c.chunk
        FROM jobs_batch_chunks AS c
        JOIN per_chunk AS p ON p.batch = c.batch_id AND p.chunk = c.chunk
        ORDER BY c.batch_id, c.chunk
        FOR NO KEY UPDATE OF c
    )
    UPDATE jobs_batch_chunks AS c
    SET pending = c.pending + p.pending,
        done = c.done + p.done,
        dead = c.dead + p.dead,
        cancelled = c.cancelled + p.cancelled
    FROM per_chunk AS p JOIN locked AS l ON l.batch_id = p.batch AND l.chunk = p.chunk
    WHERE c.batch_id = p.batch AND c.chunk = p.chunk;

    FOR moved IN
        SELECT m.id, m.became, m.became IN ('done', 'dead', 'cancelled') AS ended, m.dependents
        FROM unnest(moved_ids, moved_dependents, moved_from, moved_to)
             AS m(id, dependents, was, became)
        WHERE (m.was IN ('done', 'dead', 'cancelled')) <> (m.became IN ('done', 'dead', 'cancelled'))
        ORDER BY m.id
    LOOP
        moves := moves + 1;
        CONTINUE WHEN NOT moved.dependents;
        IF moved.ended THEN
            PERFORM jobs_release_dependents(moved.id, moved.became);
        ELSE
            PERFORM jobs_reopen_dependents(moved.id);
        END IF;
    END LOOP;
    RETURN moves;
END $$;

-- Dependents of prerequisite `prerequisite` that just ended in `ended_state`: one prerequisite
-- fewer to wait for; a waiting dependent becomes ready when none is left, or cancelled when
-- this one failed and the dependency says `cancel`. The dependents are locked in id order. A
-- dependent cancelled here has ended: its own workflow moves on (`jobs_workflow_steps`).
CREATE OR REPLACE FUNCTION jobs_release_dependents(prerequisite bigint, ended_state text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    reason text := format('prerequisite job %s ended %s', prerequisite, ended_state);
    ended_here record;
BEGIN
    WITH dependents AS (
        SELECT d.id, d.state AS was, e.on_failure
        FROM jobs_dependencies AS e
        JOIN jobs_queue AS d ON d.id = e.dependent_id
        WHERE e.prerequisite_id = prerequisite
        ORDER BY d.id
        FOR NO KEY UPDATE OF d
    ), released AS (
        UPDATE jobs_queue AS d
        SET prerequisites_left = d.prerequisites_left - 1,
            state = CASE
                WHEN d.state <> 'waiting' THEN d.state
                WHEN ended_state <> 'done' AND e.on_failure = 'cancel' THEN 'cancelled'
                WHEN d.prerequisites_left = 1 THEN 'ready'
                ELSE 'waiting' END,
            finished_at = CASE
                WHEN d.state = 'waiting' AND ended_state <> 'done' AND e.on_failure = 'cancel'
                THEN now() ELSE d.finished_at END,
            cancelled_by_prerequisite = CASE
                WHEN d.state = 'waiting' AND ended_state <> 'done' AND e.on_failure = 'cancel'
                THEN prerequisite ELSE d.cancelled_by_prerequisite END,
            cancel_reason = CASE
                WHEN d.state = 'waiting' AND ended_state <> 'done' AND e.on_failure = 'cancel'
                THEN reason ELSE d.cancel_reason END,
            errors = CASE
                WHEN d.state = 'waiting' AND ended_state <> 'done' AND e.on_failure = 'cancel'
                THEN d.errors || jsonb_build_array(jsonb_build_object(
                    'attempt', d.attempts, 'at', now(), 'kind', 'cancelled', 'error', reason))
                ELSE d.errors END
        FROM dependents AS e
        WHERE d.id = e.id
        RETURNING d.id, e.was, d.state, d.queue, d.run_at, d.prerequisites_left, d.batch_id,
                  d.has_dependents
    ), announced AS (
        SELECT count(pg_notify('jobs_queue', due.queue)) AS queues
        FROM (SELECT DISTINCT queue FROM released
              WHERE state = 'ready' AND prerequisites_left = 0 AND run_at <= now()) AS due
    )
    SELECT array_agg(id) AS ids, array_agg(batch_id) AS batches,
           array_agg(has_dependents) AS dependents, array_agg(was) AS was,
           array_agg(state) AS became
    INTO ended_here
    FROM released
    WHERE (SELECT queues FROM announced) >= 0
      AND was = 'waiting' AND state = 'cancelled'
      AND (has_dependents OR batch_id IS NOT NULL);
    IF ended_here.ids IS NOT NULL THEN
        PERFORM jobs_workflow_steps(ended_here.ids, ended_here.batches, ended_here.dependents,
                                    ended_here.was, ended_here.became);
    END IF;
END $$;

-- Dependents of prerequisite `prerequisite`, which had ended and is pending again (a replay):
-- they wait for it again, and those it cancelled wait again too, unless another failed
-- prerequisite of theirs says `cancel` (they stay cancelled, naming that one). A dependent
-- waiting again has been re-opened: its own workflow moves on (`jobs_workflow_steps`).
CREATE OR REPLACE FUNCTION jobs_reopen_dependents(prerequisite bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    dependent record;
    other_failed record;
BEGIN
    FOR dependent IN
        UPDATE jobs_queue AS d
        SET prerequisites_left = d.prerequisites_left + 1
        FROM jobs_dependencies AS e
        WHERE e.prerequisite_id = prerequisite AND d.id = e.dependent_id
        RETURNING d.id, d.state, d.cancelled_by_prerequisite, d.batch_id, d.has_dependents
    LOOP
        CONTINUE WHEN dependent.state <> 'cancelled'
                   OR dependent.cancelled_by_prerequisite IS DISTINCT FROM prerequisite;
        SELECT p.id, p.state INTO other_failed
        FROM jobs_dependencies AS other
        JOIN jobs_queue AS p ON p.id = other.prerequisite_id
        WHERE other.dependent_id = dependent.id AND other.prerequisite_id <> prerequisite
          AND other.on_failure = 'cancel' AND p.state IN ('dead', 'cancelled')
        ORDER BY p.id
        LIMIT 1;
        IF FOUND THEN
            UPDATE jobs_queue
            SET cancelled_by_prerequisite = other_failed.id,
                cancel_reason = format('prerequisite job %s ended %s', other_failed.id, other_failed.state)
            WHERE id = dependent.id;
        ELSE
            UPDATE jobs_queue
            SET state = 'waiting', finished_at = NULL, cancelled_by_prerequisite = NULL,
                cancel_reason = NULL
            WHERE id = dependent.id;
            IF dependent.has_dependents OR dependent.batch_id IS NOT NULL THEN
                PERFORM jobs_workflow_steps(ARRAY[dependent.id], ARRAY[dependent.batch_id],
                                            ARRAY[dependent.has_dependents],
                                            ARRAY['cancelled'], ARRAY['waiting']);
            END IF;
        END IF;
    END LOOP;
END $$;

-- A batch has just ended (every member ended): its callback `callback`, waiting, becomes ready;
-- a callback that already ran for an earlier end (a member was replayed since) runs again, and
-- what depends on it waits for it again (`jobs_workflow_steps`).
CREATE OR REPLACE FUNCTION jobs_batch_ended(callback bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    callback_was record;
    released record;
BEGIN
    SELECT state, batch_id, has_dependents INTO callback_was
    FROM jobs_queue WHERE id = callback AND state IN ('waiting', 'done', 'dead')
    FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    UPDATE jobs_queue
    SET state = 'ready',
        attempts = CASE WHEN callback_was.state = 'waiting' THEN attempts ELSE 0 END,
        finished_at = NULL
    WHERE id = callback
    RETURNING queue, run_at INTO released;
    IF released.run_at <= now() THEN
        PERFORM pg_notify('jobs_queue', released.queue);
    END IF;
    IF callback_was.state <> 'waiting' AND (callback_was.has_dependents OR callback_was.batch_id IS NOT NULL) THEN
        PERFORM jobs_workflow_steps(ARRAY[callback], ARRAY[callback_was.batch_id],
                                    ARRAY[callback_was.has_dependents], ARRAY[callback_was.state],
                                    ARRAY['ready']);
    END IF;
END $$;
