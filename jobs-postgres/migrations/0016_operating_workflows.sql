-- Operating workflows: finding the batches `check` reports (open too long) and the batches
-- retention removes (ended long ago), without reading every batch.

-- Open batches, oldest first, for `check`.
CREATE INDEX jobs_batches_open ON jobs_batches (created_at, id) WHERE ended_at IS NULL;

-- Ended batches, by when they ended, for retention.
CREATE INDEX jobs_batches_ended ON jobs_batches (ended_at) WHERE ended_at IS NOT NULL;

-- Waiting jobs of a kind, newest first, for the search of a kind's jobs: the index of
-- migration 15 (queue, id) serves the counts per queue, not a kind.
CREATE INDEX jobs_queue_waiting_kind ON jobs_queue (kind, id) WHERE state = 'waiting';
