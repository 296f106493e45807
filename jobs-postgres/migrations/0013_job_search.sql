-- Finding jobs (`admin::find_jobs`, `jobs job list`) on a table holding millions of retained rows.
--
-- Search pages walk the jobs newest first by id, through an index that yields them in that
-- order, so that a page reads about as many rows as it shows. Live jobs are few and already
-- indexed by state (ready, running, dead); done and cancelled jobs are kept for days and are
-- most of the table, so a search for one kind among them needs an index of its own.
--
-- Both indexes are partial on states a job reaches only when it finishes: an enqueue adds no
-- entry to either (its row is ready), and finishing a job adds one entry (the update that
-- changes the state is never a HOT update, so every other index gets a new entry then too).

-- Done and cancelled jobs of a kind, newest first; per state, so that the cancelled jobs of a
-- kind are found without reading its done ones.
CREATE INDEX jobs_queue_finished_kind ON jobs_queue (kind, state, id)
    WHERE state IN ('done', 'cancelled');

-- Finished jobs whose `active` dedupe key no longer holds (done, dead, cancelled): with the two
-- unique dedupe indexes, every job carrying a key is found by the key's digest, whatever its
-- state and scope.
CREATE INDEX jobs_queue_dedupe_finished
    ON jobs_queue (kind, sha256(decode(replace(dedupe_key, '\', '\\'), 'escape')))
    WHERE dedupe_scope = 'active' AND state NOT IN ('ready', 'running');
