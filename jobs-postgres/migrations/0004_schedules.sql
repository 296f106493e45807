-- Schedules: one row per named schedule, shared by every process that runs it. `last_tick_at`
-- is the latest tick dealt with (turned into a job, or skipped as missed): a scheduling pass
-- locks the row, enqueues the ticks after it and moves it forward, so each tick becomes one job
-- however many processes schedule. `last_success_at` is when a job of the schedule last
-- completed, for the alarm on schedules that stopped succeeding.
CREATE TABLE jobs_schedules (
    name            text        PRIMARY KEY,
    kind            text        NOT NULL,
    queue           text        NOT NULL,
    description     text        NOT NULL,
    missed          text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    last_tick_at    timestamptz NOT NULL,
    last_success_at timestamptz
);

-- The schedule a job was enqueued for, when it was.
ALTER TABLE jobs_queue ADD COLUMN schedule text;
