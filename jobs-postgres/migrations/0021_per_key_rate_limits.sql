-- Per-key rate limits: at most N jobs of a kind with the same limit key start in any window of a
-- given length (`#[job(limit_key = "<merchant_id>", rate_limit_per_key = "10/1s")]`), across
-- every worker.
--
-- One row per kind and key that started jobs lately holds the starts still inside the window,
-- as `jobs_rate_limits` does for a kind: claims of the kind are serialized by the kind's advisory
-- lock and take their time after it is granted, so the times in a row only grow. A claim reads
-- the rows of the keys that started jobs within the window (by `last_started_at`), rewrites those
-- of the keys it starts jobs of, and deletes a few rows whose starts have all left the window, so
-- the table holds about one row per key active within a window.

CREATE TABLE jobs_key_rate_limits (
    kind            text          NOT NULL,
    key             text          NOT NULL,
    -- The window of the limit the last claim enforced (see `jobs_rate_limits.window_secs`).
    window_secs     float8        NOT NULL CHECK (window_secs > 0),
    -- When the last start recorded here happened.
    last_started_at timestamptz   NOT NULL,
    -- When each claim still inside the window started jobs of the key, oldest first, and how
    -- many (`started` pairs with `started_at`).
    started_at      timestamptz[] NOT NULL,
    started         integer[]     NOT NULL,
    PRIMARY KEY (kind, key),
    CHECK (cardinality(started_at) = cardinality(started))
);

CREATE INDEX jobs_key_rate_limits_recent ON jobs_key_rate_limits (kind, last_started_at);
