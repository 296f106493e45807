-- Turns for the jobs of kinds with a per-key limit: a job with a limit key takes its key's
-- turns, as a job with a fairness key does (migration 22), so that while no key is at its
-- limit a claim of such a kind reads one range of an index in turn order instead of visiting
-- the keys one by one. A kind has a fairness key or a limit key, never both: a job's turn key is
-- whichever it has, `coalesce(fair_key, limit_key)`, and the turn indexes are built on it.

-- The function's statements use their generic plans: the one-off plan of the key's last turn,
-- made from statistics that have not seen the kind's keys yet (a first large insert), can read
-- the kind's whole ready range for each row instead of one descent of the key's index.
CREATE OR REPLACE FUNCTION jobs_queue_fair_turn() RETURNS trigger LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    round_setting text := 'jobs_fair.round_'
        || md5(format('%s %s %s %s', length(NEW.queue), NEW.queue, NEW.kind, NEW.priority));
    turn_key text := coalesce(NEW.fair_key, NEW.limit_key);
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
                    AND coalesce(fair_key, limit_key) = turn_key AND priority = NEW.priority
                    AND fair_turn > reached
                  ORDER BY fair_turn DESC
                  LIMIT 1);
    NEW.fair_turn := 1 + greatest(reached, last_turn);
    RETURN NEW;
END
$$;

DROP TRIGGER jobs_queue_fair_turn ON jobs_queue;
CREATE TRIGGER jobs_queue_fair_turn BEFORE INSERT ON jobs_queue
    FOR EACH ROW WHEN (coalesce(NEW.fair_key, NEW.limit_key) IS NOT NULL)
    EXECUTE FUNCTION jobs_queue_fair_turn();
DROP TRIGGER jobs_queue_fair_turn_again ON jobs_queue;
CREATE TRIGGER jobs_queue_fair_turn_again BEFORE UPDATE OF state ON jobs_queue
    FOR EACH ROW WHEN (coalesce(NEW.fair_key, NEW.limit_key) IS NOT NULL AND NEW.state = 'ready'
                       AND OLD.state <> 'ready')
    EXECUTE FUNCTION jobs_queue_fair_turn();

-- The turn indexes are built again on the turn key. They are dropped first, so that the turns
-- of the jobs already enqueued with a limit key (below) are written without maintaining them.
DROP INDEX jobs_queue_ready_fair;
DROP INDEX jobs_queue_ready_fair_key;
DROP INDEX jobs_queue_ready_fair_unturned;

-- The ready jobs already enqueued with a limit key and due take turns in their key's claim
-- order (no claim of their kinds has recorded a round yet); those not due yet take theirs when
-- they are.
UPDATE jobs_queue AS j
SET fair_turn = numbered.turn
FROM (
    SELECT id, row_number() OVER (PARTITION BY queue, kind, limit_key, priority
                                  ORDER BY run_at, id) AS turn
    FROM jobs_queue
    WHERE state = 'ready' AND limit_key IS NOT NULL AND fair_key IS NULL AND run_at <= now()
) AS numbered
WHERE j.id = numbered.id;

-- The ready jobs with a turn key in claim order: priority (higher first), turn, key (byte by
-- byte), id, then `run_at`, as migration 22 built them on the fairness key.
CREATE INDEX jobs_queue_ready_fair
    ON jobs_queue (queue, kind, priority DESC, fair_turn,
                   (coalesce(fair_key, limit_key)) COLLATE "C", id, run_at)
    WHERE state = 'ready' AND fair_turn IS NOT NULL;

-- A key's last turn at a priority: one descent.
CREATE INDEX jobs_queue_ready_fair_key
    ON jobs_queue (queue, kind, (coalesce(fair_key, limit_key)), priority, fair_turn)
    WHERE state = 'ready' AND fair_turn IS NOT NULL;

-- The ready jobs with a turn key and no turn, by when they are due.
CREATE INDEX jobs_queue_ready_fair_unturned ON jobs_queue (queue, kind, run_at, id)
    WHERE state = 'ready' AND coalesce(fair_key, limit_key) IS NOT NULL AND fair_turn IS NULL;
