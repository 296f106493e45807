-- Cancelling jobs. A ready job (due, or waiting for a later run_at) is cancelled at once: state
-- 'cancelled', finished, pruned by retention like a done job. A running job gets a request
-- instead: the worker tells the run (its heartbeat returns the flag), and the run's outcome,
-- unless it succeeded, is written as 'cancelled' rather than a retry; a rescue of it cancels it
-- rather than making it ready again.
--
-- Three nullable columns without defaults: adding them changes the catalog only, not the rows.
ALTER TABLE jobs_queue
    -- When cancellation was asked for (the first request is kept).
    ADD COLUMN cancel_requested_at timestamptz,
    -- Who asked and why, as the operator said (free text, for the record).
    ADD COLUMN cancel_requested_by text,
    ADD COLUMN cancel_reason       text;
