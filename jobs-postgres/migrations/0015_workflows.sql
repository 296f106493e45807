-- Workflows: jobs that wait for other jobs to end (dependencies), and batches whose callback job
-- runs once every member has ended.
--
-- A job enqueued to run after others is `waiting`: not claimable (claims read only ready rows),
-- counted by stats. It becomes ready, or cancelled, in the transaction that ends its last
-- prerequisite (or a failing one), by the trigger below: every path that ends a job (a worker's
-- outcome, a completion in the job's own transaction, a rescue, an operator's cancel) and every
-- path that re-opens one (a dead-letter replay) goes through it, so no sweeper is needed.
--
-- Plain jobs pay nothing but the trigger's WHEN test on their state changes: the trigger runs
-- only for rows with dependents or in a batch, and only when they end or are re-opened (not
-- when they are claimed or retried).

ALTER TABLE jobs_queue DROP CONSTRAINT jobs_queue_state_check;
ALTER TABLE jobs_queue ADD CONSTRAINT jobs_queue_state_check
    CHECK (state IN ('waiting', 'ready', 'running', 'done', 'dead', 'cancelled')) NOT VALID;
ALTER TABLE jobs_queue VALIDATE CONSTRAINT jobs_queue_state_check;

-- Nullable columns without defaults, and one with a constant default: adding them changes the
-- catalog only, not the rows.
ALTER TABLE jobs_queue
    -- For a job with prerequisites: how many of them have not ended yet.
    ADD COLUMN prerequisites_left        integer,
    -- For a job cancelled because a prerequisite failed: that prerequisite (a replay of it
    -- re-opens the job).
    ADD COLUMN cancelled_by_prerequisite bigint,
    -- Whether some job was enqueued to run after this one.
    ADD COLUMN has_dependents            boolean NOT NULL DEFAULT false,
    -- The batch this job is a member of.
    ADD COLUMN batch_id                  bigint;

-- An `active` dedupe key holds while the job is pending: waiting, ready or running.
DROP INDEX jobs_queue_dedupe_active;
CREATE UNIQUE INDEX jobs_queue_dedupe_active
    ON jobs_queue (kind, sha256(decode(replace(dedupe_key, '\', '\\'), 'escape')))
    WHERE dedupe_scope = 'active' AND state IN ('waiting', 'ready', 'running');

-- Waiting jobs, counted per queue by stats.
CREATE INDEX jobs_queue_waiting ON jobs_queue (queue, id) WHERE state = 'waiting';

-- A batch's members, for its callback and for operators.
CREATE INDEX jobs_queue_batch_members ON jobs_queue (batch_id, id) WHERE batch_id IS NOT NULL;

-- One row per dependency: `dependent_id` runs after `prerequisite_id` ends. When the
-- prerequisite ends dead or cancelled, `on_failure` says what the dependent does: `cancel` (it
-- is cancelled, naming the prerequisite) or `run` (it runs all the same).
CREATE TABLE jobs_dependencies (
    prerequisite_id bigint NOT NULL,
    dependent_id    bigint NOT NULL,
    on_failure      text   NOT NULL CHECK (on_failure IN ('cancel', 'run')),
    PRIMARY KEY (prerequisite_id, dependent_id)
);
CREATE INDEX jobs_dependencies_dependent ON jobs_dependencies (dependent_id);

-- A batch: members (jobs whose `batch_id` is this id) and an optional callback job, waiting
-- until every member has ended.
--
-- Members are counted in chunks of 64 consecutive ids (`jobs_batch_chunks`), not on the batch
-- row: members are claimed roughly in id order, so workers ending members at the same time
-- update different chunk rows, and the batch row changes only when a chunk closes (its last
-- member ends) or re-opens. `open_chunks` counts the chunks with members pending; the batch
-- ends when it reaches 0.
CREATE TABLE jobs_batches (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    callback_id bigint,
    open_chunks integer     NOT NULL DEFAULT 0 CHECK (open_chunks >= 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- When the last member ended (NULL while any is pending).
    ended_at    timestamptz
);
CREATE UNIQUE INDEX jobs_batches_callback ON jobs_batches (callback_id);

CREATE TABLE jobs_batch_chunks (
    batch_id  bigint  NOT NULL,
    -- Member id / 64.
    chunk     bigint  NOT NULL,
    pending   integer NOT NULL CHECK (pending >= 0),
    done      integer NOT NULL DEFAULT 0,
    dead      integer NOT NULL DEFAULT 0,
    cancelled integer NOT NULL DEFAULT 0,
    -- Whether the batch counts this chunk as closed (not in `open_chunks`). It differs from
    -- `pending = 0` only between a change of `pending` and the end of its transaction.
    closed    boolean NOT NULL DEFAULT false,
    PRIMARY KEY (batch_id, chunk)
);

-- Dependents of prerequisite `prerequisite` that just ended in `ended_state`: one prerequisite
-- fewer to wait for; a waiting dependent becomes ready when none is left, or cancelled when
-- this one failed and the dependency says `cancel`. Cancelling a dependent ends it, which runs
-- this again for its own dependents.
CREATE FUNCTION jobs_release_dependents(prerequisite bigint, ended_state text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    reason text := format('prerequisite job %s ended %s', prerequisite, ended_state);
    announced bigint;
BEGIN
    WITH released AS (
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
        FROM jobs_dependencies AS e
        WHERE e.prerequisite_id = prerequisite AND d.id = e.dependent_id
        RETURNING d.queue, d.state, d.run_at, d.prerequisites_left
    )
    SELECT count(pg_notify('jobs_queue', due.queue)) INTO announced
    FROM (SELECT DISTINCT queue FROM released
          WHERE state = 'ready' AND prerequisites_left = 0 AND run_at <= now()) AS due;
END $$;

-- Dependents of prerequisite `prerequisite`, which had ended and is pending again (a replay):
-- they wait for it again, and those it cancelled wait again too, unless another failed
-- prerequisite of theirs says `cancel` (they stay cancelled, naming that one). Re-opening a
-- dependent runs this again for its own dependents.
CREATE FUNCTION jobs_reopen_dependents(prerequisite bigint)
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
        RETURNING d.id, d.state, d.cancelled_by_prerequisite
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
        END IF;
    END LOOP;
END $$;

-- What runs when a job with dependents or in a batch ends, or is re-opened.
--
-- A statement that ends many batch members at once (the workers' outcome writes) counts them
-- itself, once per chunk, and says so by setting `jobs.members_counted` to 'statement' for its
-- transaction before its first row: the members it ends are then not counted here one by one,
-- and do not even call this function unless they have dependents.
CREATE FUNCTION jobs_workflow_step() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ended boolean := NEW.state IN ('done', 'dead', 'cancelled');
BEGIN
    IF NEW.has_dependents THEN
        IF ended THEN
            PERFORM jobs_release_dependents(NEW.id, NEW.state);
        ELSE
            PERFORM jobs_reopen_dependents(NEW.id);
        END IF;
    END IF;
    IF NEW.batch_id IS NOT NULL
       AND current_setting('jobs.members_counted', true) IS DISTINCT FROM 'statement' THEN
        UPDATE jobs_batch_chunks
        SET pending = pending + CASE WHEN ended THEN -1 ELSE 1 END,
            done = done + CASE WHEN ended AND NEW.state = 'done' THEN 1
                               WHEN NOT ended AND OLD.state = 'done' THEN -1 ELSE 0 END,
            dead = dead + CASE WHEN ended AND NEW.state = 'dead' THEN 1
                               WHEN NOT ended AND OLD.state = 'dead' THEN -1 ELSE 0 END,
            cancelled = cancelled + CASE WHEN ended AND NEW.state = 'cancelled' THEN 1
                                         WHEN NOT ended AND OLD.state = 'cancelled' THEN -1 ELSE 0 END
        WHERE batch_id = NEW.batch_id AND chunk = NEW.id / 64;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_workflow_step
    AFTER UPDATE OF state ON jobs_queue
    FOR EACH ROW
    WHEN ((NEW.has_dependents
           OR (NEW.batch_id IS NOT NULL
               AND current_setting('jobs.members_counted', true) IS DISTINCT FROM 'statement'))
          AND (NEW.state IN ('done', 'dead', 'cancelled')) <> (OLD.state IN ('done', 'dead', 'cancelled')))
    EXECUTE FUNCTION jobs_workflow_step();

-- A batch has just ended (every member ended): its callback `callback`, waiting, becomes ready;
-- a callback that already ran for an earlier end (a member was replayed since) runs again.
CREATE FUNCTION jobs_batch_ended(callback bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    announced bigint;
BEGIN
    WITH released AS (
        UPDATE jobs_queue
        SET state = 'ready',
            attempts = CASE WHEN state = 'waiting' THEN attempts ELSE 0 END,
            finished_at = NULL
        WHERE id = callback AND state IN ('waiting', 'done', 'dead')
        RETURNING queue, run_at
    )
    SELECT count(pg_notify('jobs_queue', queue)) INTO announced
    FROM released WHERE run_at <= now();
END $$;

-- Settles a chunk whose pending count changed in this transaction, at commit (deferred, so that
-- the batch row is locked last, after every chunk row the transaction changes, and no two
-- transactions wait for each other): a chunk that closed takes one from `open_chunks` and ends
-- the batch when none is left; a chunk that re-opened (a member replayed, or added) adds one
-- and re-opens the batch.
CREATE FUNCTION jobs_batch_chunk_settle() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    now_pending integer;
    was_closed boolean;
    batch jobs_batches;
BEGIN
    SELECT pending, closed INTO now_pending, was_closed
    FROM jobs_batch_chunks WHERE batch_id = NEW.batch_id AND chunk = NEW.chunk;
    IF NOT FOUND OR (now_pending = 0) = was_closed THEN
        RETURN NULL;
    END IF;
    UPDATE jobs_batch_chunks SET closed = (now_pending = 0)
    WHERE batch_id = NEW.batch_id AND chunk = NEW.chunk;
    UPDATE jobs_batches
    SET open_chunks = open_chunks + CASE WHEN now_pending = 0 THEN -1 ELSE 1 END,
        ended_at = CASE WHEN now_pending = 0 AND open_chunks = 1 THEN now()
                        WHEN now_pending > 0 THEN NULL
                        ELSE ended_at END
    WHERE id = NEW.batch_id
    RETURNING * INTO batch;
    IF batch.open_chunks = 0 AND batch.callback_id IS NOT NULL THEN
        PERFORM jobs_batch_ended(batch.callback_id);
    ELSIF now_pending > 0 AND batch.callback_id IS NOT NULL THEN
        -- Re-opened before its callback started: the callback waits again.
        UPDATE jobs_queue SET state = 'waiting'
        WHERE id = batch.callback_id AND state = 'ready' AND attempts = 0;
    END IF;
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER jobs_batch_chunk_pending
    AFTER UPDATE OF pending ON jobs_batch_chunks
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN ((NEW.pending = 0) <> NEW.closed)
    EXECUTE FUNCTION jobs_batch_chunk_settle();

CREATE CONSTRAINT TRIGGER jobs_batch_chunk_added
    AFTER INSERT ON jobs_batch_chunks
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN ((NEW.pending = 0) <> NEW.closed)
    EXECUTE FUNCTION jobs_batch_chunk_settle();
