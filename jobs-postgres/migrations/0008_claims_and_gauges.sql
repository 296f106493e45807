-- The gauges' health numbers, counted by one process per interval and read by the others.
CREATE TABLE jobs_gauges (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    counted_at timestamptz NOT NULL DEFAULT '-infinity',
    figures    jsonb
);
INSERT INTO jobs_gauges DEFAULT VALUES;

-- Claims walk only the ready rows of the kinds they take: the kind comes right after the queue,
-- so that jobs of kinds a worker does not run (a rolling deploy, workers of different kinds on
-- one queue) cost its claims nothing. Creating it locks writes to the table while it is built.
DROP INDEX jobs_queue_ready;
CREATE INDEX jobs_queue_ready ON jobs_queue (queue, kind, priority DESC, run_at, id)
    WHERE state = 'ready';
