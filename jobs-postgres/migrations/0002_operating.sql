-- Retention deletes finished jobs oldest first: this index finds them without walking the live
-- rows or the dead ones, which are kept until an operator replays or discards them.
CREATE INDEX jobs_queue_finished ON jobs_queue (finished_at)
    WHERE state IN ('done', 'cancelled');

-- Health numbers estimate the done and cancelled counts of each queue and kind from the
-- planner's sample of (queue, kind, state) combinations, gathered by ANALYZE and autovacuum,
-- instead of counting millions of retained rows on every poll.
CREATE STATISTICS jobs_queue_state_mix (mcv) ON queue, kind, state FROM jobs_queue;
