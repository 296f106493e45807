-- Outbox rows get a message id unique beyond one database, and topics a syntax.
--
-- Message ids. The relay used the row's id as the broker's message id (`Nats-Msg-Id`), but row
-- ids repeat across databases and after a failover to a lagging standby, a point-in-time
-- restore or an identity reset: a new event then carried the id of an old one, and a broker
-- deduplicating on it dropped the new event while the relay marked it published. Each row now
-- has a random uuid, drawn when it is written and the same on every attempt. Existing rows get
-- one each here (the table is rewritten once, under an exclusive lock: published rows are kept
-- only for the retention age, so the table is small unless retention was turned off). A random
-- uuid needs no index: two rows drawing the same one is not a practical concern.
ALTER TABLE jobs_outbox
    ADD COLUMN message_id uuid NOT NULL DEFAULT gen_random_uuid();

-- Topics. A topic reaches a broker's text protocol as (part of) a subject: one or more
-- non-empty tokens separated by `.`, none holding whitespace, control characters or the
-- wildcards `*` and `>`, at most 255 bytes. The same rule as `jobs_postgres::outbox::validate_topic`
-- (Rust's `char::is_whitespace` and `char::is_control`, listed here character by character so that
-- the result does not depend on the database's locale), which `publish_in` applies first.
CREATE FUNCTION jobs_outbox_topic_is_valid(topic text) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT octet_length(topic) <= 255
       AND topic ~ '^[^.*>\x01-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+(\.[^.*>\x01-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+)*$'
$$;

-- Pending rows written before this check with a topic it refuses could never be published
-- (a broker refuses them, or they go where no consumer expects): they are parked, with the
-- reason, for an operator to see. Published and parked rows keep their topics as history.
UPDATE jobs_outbox
SET state = 'parked', parked_at = now(),
    last_error = 'parked by the jobs migration outbox_ids_topics: the topic is not valid (one or more non-empty tokens separated by dots, no whitespace, control characters, * or >, at most 255 bytes)'
WHERE state = 'pending' AND NOT jobs_outbox_topic_is_valid(topic);

-- Only a pending row is published, so only a pending row must have a valid topic: a row is
-- refused when written with one that is not, and a parked one cannot be made pending again.
ALTER TABLE jobs_outbox
    ADD CONSTRAINT jobs_outbox_topic_syntax
    CHECK (state <> 'pending' OR jobs_outbox_topic_is_valid(topic));
