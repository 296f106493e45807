-- Keys of work already done, recorded in the same transaction as the work's effects, so that
-- work spanning several jobs, or replayed by an operator, has its effect once. A key without an
-- expiry is kept for good; an expired key counts as never recorded and retention deletes it.
CREATE TABLE jobs_processed_keys (
    key          text        PRIMARY KEY,
    processed_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz
);

CREATE INDEX jobs_processed_keys_expiry ON jobs_processed_keys (expires_at)
    WHERE expires_at IS NOT NULL;
