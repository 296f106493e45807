-- Fair share: the jobs of a kind with a fairness key (`#[job(fair_key = "<tenant_id>")]`) are
-- claimed round-robin across their keys rather than oldest first.
--
-- The key is rendered at enqueue from the payload, like a dedupe key, and kept with the job
-- through retries, rescues and replays. Jobs without one (every kind without a fairness key) are
-- not in the index below, which costs them nothing.

ALTER TABLE jobs_queue ADD COLUMN fair_key text;

-- The ready jobs of each fairness key, in claim order within the key. A fair claim walks the
-- distinct keys of a queue and kind through it, one descent per key, starting after where the
-- worker's last claim ended, and takes the first jobs of each key it visits.
CREATE INDEX jobs_queue_ready_fair ON jobs_queue (queue, kind, fair_key, priority DESC, run_at, id)
    WHERE state = 'ready' AND fair_key IS NOT NULL;
