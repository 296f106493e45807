-- What operators act on without writing SQL.
--
-- Paused queues: one row per queue that workers must not claim from, until it is resumed (the
-- row deleted). Kept in the database so that a pause holds across every worker process and
-- survives restarts; every claim checks it (one probe of this small table's primary key).
CREATE TABLE jobs_queue_pauses (
    queue     text        PRIMARY KEY,
    paused_at timestamptz NOT NULL DEFAULT now(),
    -- Who paused it and why, as the operator said (free text, for the record).
    paused_by text        NOT NULL,
    reason    text
);

-- A schedule's job settings as the registering worker's code declares them, so that a run can
-- be triggered from outside the workers with the same settings as its ticks. NULL until a worker
-- of this version registers the schedule.
ALTER TABLE jobs_schedules
    ADD COLUMN priority     smallint,
    ADD COLUMN max_attempts integer CHECK (max_attempts >= 1);
