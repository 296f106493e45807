-- The transactional outbox: events written in the application's transaction, published to a
-- broker later by a relay. One row per event, from `publish_in` until retention deletes it once
-- published. `pending` rows wait for a relay (`next_attempt_at` holds a row backing off after a
-- failure); `published` rows were acknowledged by the broker; `parked` rows failed permanently,
-- or for all their attempts, and wait for an operator, as dead jobs do.
CREATE TABLE jobs_outbox (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic           text        NOT NULL CHECK (topic <> ''),
    payload         jsonb       NOT NULL,
    state           text        NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'published', 'parked')),
    attempts        integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    published_at    timestamptz,
    parked_at       timestamptz,
    CONSTRAINT jobs_outbox_published_at CHECK ((state = 'published') = (published_at IS NOT NULL)),
    CONSTRAINT jobs_outbox_parked_at CHECK ((state = 'parked') = (parked_at IS NOT NULL))
);

-- The relay claims pending rows in id order, walking only pending ones.
CREATE INDEX jobs_outbox_pending ON jobs_outbox (id)
    WHERE state = 'pending';
-- Per topic, the first pending row outside a relay's claim (order within a topic).
CREATE INDEX jobs_outbox_pending_topic ON jobs_outbox (topic, id)
    WHERE state = 'pending';
-- Per topic, the pending rows that failed before and may be backing off, holding back the later
-- rows of their topic: few, so the claim checks them without walking every pending row.
CREATE INDEX jobs_outbox_retrying ON jobs_outbox (topic, id)
    WHERE state = 'pending' AND attempts > 0;
-- Operators list parked rows.
CREATE INDEX jobs_outbox_parked ON jobs_outbox (id)
    WHERE state = 'parked';
-- Retention deletes published rows oldest first.
CREATE INDEX jobs_outbox_published ON jobs_outbox (published_at)
    WHERE state = 'published';
