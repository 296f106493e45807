-- Fair share by turns: each job with a fairness key takes its key's next turn when it becomes
-- due, so that a fair claim reads one range of an index in turn order, as any claim reads the
-- ready index, instead of visiting the keys one by one.
--
-- A job's turn is one more than the greater of its key's last turn among the ready jobs of its
-- queue, kind and priority, and the turn the kind's claims of that priority in the queue have
-- reached (`jobs_fair_rounds`): a key with a backlog takes turns after its own, and a key that
-- comes in takes the next round, not the turns the claims have passed. Claims take the ready jobs of a
-- priority by turn, then key, then id: the first job of every key, in key order, then the
-- second, as a ring.
--
-- A job takes its turn when it is inserted ready and due, or made ready and due again (a
-- rescue, a replay, a workflow step released). A job not due yet (scheduled, or retried after a
-- backoff) has none (`fair_turn` null) until a claim of its kind finds it due and gives it one:
-- it takes the next round when it becomes due, like a job enqueued then, and it is in no
-- claim's way meanwhile. A job handed back unstarted (running, back to ready with its attempt
-- given back and its `run_at` kept) keeps its turn, and with it its place.

ALTER TABLE jobs_queue ADD COLUMN fair_turn bigint;

-- The turn the claims of a fair kind have reached in a queue, per priority: the highest turn a
-- claim took.
CREATE TABLE jobs_fair_rounds (
    queue text NOT NULL,
    kind text NOT NULL,
    priority smallint NOT NULL,
    turn bigint NOT NULL,
    PRIMARY KEY (queue, kind, priority)
);

-- Sets the turn of a job with a fairness key inserted, or made ready again (see above). A
-- trigger, so that every way a job is inserted or made ready (one, many in one statement,
-- workflow steps, schedules, rescues, replays) takes turns alike. A transaction reads the round
-- once (kept in a setting local to it): the jobs of one key it writes take successive turns
-- however far the claims go meanwhile (rows written earlier by the same statement are seen).
-- Two transactions writing jobs of one key at once may give two of them the same turn: the key
-- then gets two jobs in that round.
CREATE FUNCTION jobs_queue_fair_turn() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    round_setting text := 'jobs_fair.round_'
        || md5(format('%s %s %s %s', length(NEW.queue), NEW.queue, NEW.kind, NEW.priority));
    reached bigint;
    last_turn bigint;
BEGIN
    IF NEW.state <> 'ready' OR NEW.run_at > now() THEN
        NEW.fair_turn := NULL;
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.state = 'running' AND NEW.attempts = OLD.attempts - 1
       AND NEW.run_at = OLD.run_at AND OLD.fair_turn IS NOT NULL THEN
        RETURN NEW;
    END IF;
    reached := nullif(current_setting(round_setting, true), '')::bigint;
    IF reached IS NULL THEN
        reached := coalesce((SELECT turn FROM jobs_fair_rounds
                             WHERE queue = NEW.queue AND kind = NEW.kind
                               AND priority = NEW.priority),
                            0);
        PERFORM set_config(round_setting, reached::text, true);
    END IF;
    -- Only turns past the round: the claimed ones are not, and the index entries of the jobs
    -- claimed since the last vacuum are not walked.
    last_turn := (SELECT fair_turn FROM jobs_queue
                  WHERE state = 'ready' AND queue = NEW.queue AND kind = NEW.kind
                    AND fair_key = NEW.fair_key AND priority = NEW.priority
                    AND fair_turn > reached
                  ORDER BY fair_turn DESC
                  LIMIT 1);
    NEW.fair_turn := 1 + greatest(reached, last_turn);
    RETURN NEW;
END
$$;

CREATE TRIGGER jobs_queue_fair_turn BEFORE INSERT ON jobs_queue
    FOR EACH ROW WHEN (NEW.fair_key IS NOT NULL) EXECUTE FUNCTION jobs_queue_fair_turn();

-- At commit, moves the turn of a job the transaction inserted or made ready, when the claims
-- have reached it since the transaction read the round, on by as many turns as they went:
-- no claim could see the job before it commits, so the claims that ran meanwhile went past its
-- turn, and the next claims, which go on from where the last one began, would not find it
-- before their next look at the front. A job whose turn the claims have not reached (a key's
-- backlog past the round) stays where it is. (A claim that commits between this and the commit
-- itself can still pass a job: it waits for the next look at the front. Under REPEATABLE READ
-- or SERIALIZABLE the round read here is the transaction's, and nothing moves.)
CREATE FUNCTION jobs_queue_fair_turn_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    round_setting text := 'jobs_fair.round_'
        || md5(format('%s %s %s %s', length(NEW.queue), NEW.queue, NEW.kind, NEW.priority));
    read_then bigint := nullif(current_setting(round_setting, true), '')::bigint;
    reached bigint;
BEGIN
    reached := (SELECT turn FROM jobs_fair_rounds
                WHERE queue = NEW.queue AND kind = NEW.kind AND priority = NEW.priority);
    IF reached > read_then AND NEW.fair_turn <= reached THEN
        UPDATE jobs_queue SET fair_turn = fair_turn + (reached - read_then)
        WHERE id = NEW.id AND state = 'ready' AND fair_turn = NEW.fair_turn;
    END IF;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER jobs_queue_fair_turn_at_commit AFTER INSERT ON jobs_queue
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.fair_turn IS NOT NULL)
    EXECUTE FUNCTION jobs_queue_fair_turn_at_commit();
CREATE CONSTRAINT TRIGGER jobs_queue_fair_turn_again_at_commit AFTER UPDATE OF state ON jobs_queue
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.fair_turn IS NOT NULL AND NEW.state = 'ready' AND OLD.state <> 'ready'
                       AND NOT (OLD.state = 'running' AND NEW.attempts = OLD.attempts - 1
                                AND NEW.run_at = OLD.run_at))
    EXECUTE FUNCTION jobs_queue_fair_turn_at_commit();
CREATE TRIGGER jobs_queue_fair_turn_again BEFORE UPDATE OF state ON jobs_queue
    FOR EACH ROW WHEN (NEW.fair_key IS NOT NULL AND NEW.state = 'ready' AND OLD.state <> 'ready')
    EXECUTE FUNCTION jobs_queue_fair_turn();

-- The ready jobs already enqueued with a key and due take turns in their key's claim order;
-- those not due yet take theirs when they are.
UPDATE jobs_queue AS j
SET fair_turn = numbered.turn
FROM (
    SELECT id, row_number() OVER (PARTITION BY queue, kind, fair_key, priority
                                  ORDER BY run_at, id) AS turn
    FROM jobs_queue
    WHERE state = 'ready' AND fair_key IS NOT NULL AND run_at <= now()
) AS numbered
WHERE j.id = numbered.id;

-- The ready jobs with a key in claim order: priority (higher first), turn, key, id. Keys compare
-- byte by byte (the `C` collation), as the worker compares the places claims end at. `run_at`
-- last, so that a claim passes the jobs scheduled for later by their index entries alone.
DROP INDEX jobs_queue_ready_fair;
CREATE INDEX jobs_queue_ready_fair
    ON jobs_queue (queue, kind, priority DESC, fair_turn, fair_key COLLATE "C", id, run_at)
    WHERE state = 'ready' AND fair_turn IS NOT NULL;

-- A key's last turn at a priority, read by the trigger and by claims giving turns: one descent.
CREATE INDEX jobs_queue_ready_fair_key ON jobs_queue (queue, kind, fair_key, priority, fair_turn)
    WHERE state = 'ready' AND fair_turn IS NOT NULL;

-- The ready jobs with a key and no turn, by when they are due: a claim gives turns to those due.
CREATE INDEX jobs_queue_ready_fair_unturned ON jobs_queue (queue, kind, run_at, id)
    WHERE state = 'ready' AND fair_key IS NOT NULL AND fair_turn IS NULL;
