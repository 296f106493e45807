-- Rate limits: at most so many jobs of a kind start in any window of a given length, across
-- every worker.
--
-- One row per limited kind holds the starts still inside the window: each claim of the kind
-- appends its time and the number of jobs it started, and drops the starts the window has left
-- behind. Claims of a limited kind are serialized (by the kind's advisory lock, as the claims of
-- a kind with a running limit are), and take their time after the lock is granted, so the times
-- in a row only grow and every claim sees every start before its own.

CREATE TABLE jobs_rate_limits (
    kind         text          PRIMARY KEY,
    -- The window of the limit the last claim enforced: a claim keeps the starts inside the longer
    -- of its own window and this one, so that workers whose limits differ (a change under way)
    -- do not drop starts the other still counts.
    window_secs  float8        NOT NULL CHECK (window_secs > 0),
    -- When each claim still inside the window started its jobs, oldest first, and how many
    -- (`started` pairs with `started_at`).
    started_at   timestamptz[] NOT NULL,
    started      integer[]     NOT NULL,
    CHECK (cardinality(started_at) = cardinality(started))
);

-- The limits each live worker enforces, as it declared them when it started, so that `jobs stats`
-- can show every limit with how much of it is in use:
-- [{"kind": "...", "max_running": N or null, "rate_jobs": N or null, "rate_window_secs": S or null}].
ALTER TABLE jobs_workers ADD COLUMN limits jsonb NOT NULL DEFAULT '[]';
