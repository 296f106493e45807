-- The job table. One row per job, from enqueue until retention prunes it.
CREATE TABLE jobs_queue (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind             text        NOT NULL,
    queue            text        NOT NULL,
    payload          jsonb       NOT NULL,
    state            text        NOT NULL DEFAULT 'ready'
                     CHECK (state IN ('ready', 'running', 'done', 'dead', 'cancelled')),
    priority         smallint    NOT NULL DEFAULT 0,
    attempts         integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts     integer     NOT NULL CHECK (max_attempts >= 1),
    run_at           timestamptz NOT NULL DEFAULT now(),
    lease_token      uuid,
    lease_expires_at timestamptz,
    dedupe_key       text,
    dedupe_scope     text        CHECK (dedupe_scope IN ('retained', 'active')),
    errors           jsonb       NOT NULL DEFAULT '[]'::jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    attempted_at     timestamptz,
    finished_at      timestamptz,
    CONSTRAINT jobs_queue_dedupe_has_scope CHECK ((dedupe_key IS NULL) = (dedupe_scope IS NULL)),
    CONSTRAINT jobs_queue_lease_iff_running
        CHECK ((state = 'running') = (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL))
);

-- Claiming walks only ready rows, in claim order.
CREATE INDEX jobs_queue_ready ON jobs_queue (queue, priority DESC, run_at, id)
    WHERE state = 'ready';

-- Rescue walks only running rows, oldest lease first.
CREATE INDEX jobs_queue_leases ON jobs_queue (lease_expires_at)
    WHERE state = 'running';

-- Dedupe: a retained key holds while the row exists; an active key while the job is pending.
CREATE UNIQUE INDEX jobs_queue_dedupe_retained ON jobs_queue (kind, dedupe_key)
    WHERE dedupe_scope = 'retained';
CREATE UNIQUE INDEX jobs_queue_dedupe_active ON jobs_queue (kind, dedupe_key)
    WHERE dedupe_scope = 'active' AND state IN ('ready', 'running');

-- Operators look at dead jobs by kind.
CREATE INDEX jobs_queue_dead ON jobs_queue (kind, id)
    WHERE state = 'dead';
