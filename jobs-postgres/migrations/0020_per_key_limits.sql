-- Per-key limits: at most N jobs of a kind with the same limit key running at once
-- (`#[job(limit_key = "<merchant_id>", max_running_per_key = 2)]`), across every worker.
--
-- The key is rendered at enqueue from the payload, like a dedupe key, and kept with the job
-- through retries, rescues and replays. Jobs without one (every kind without a per-key limit) are
-- not in the index below, which costs them nothing.

ALTER TABLE jobs_queue ADD COLUMN limit_key text;

-- The ready jobs of each limit key, in claim order within the key. A claim of a kind with a
-- per-key limit walks the distinct keys of a queue and kind through it, one descent per key,
-- passing over the keys whose running jobs fill their limit, and takes the first jobs of the
-- keys with room. The running jobs per key are counted through `jobs_queue_leases` (running
-- jobs only, bounded by the slots of all workers).
CREATE INDEX jobs_queue_ready_limit_key ON jobs_queue (queue, kind, limit_key, priority DESC, run_at, id)
    WHERE state = 'ready' AND limit_key IS NOT NULL;
