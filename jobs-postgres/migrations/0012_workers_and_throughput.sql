-- Live workers: one row per worker process, written when it starts, refreshed every few seconds
-- (`WorkerConfig::presence_interval`) and deleted when it stops gracefully. A row not refreshed
-- for `gone_after` (a few refresh intervals) belongs to a worker that is gone (killed, crashed,
-- cut off from the database): readers skip it, and the next refresh of any worker deletes it.
-- Each process writes only its own row, so no row is contended.
CREATE TABLE jobs_workers (
    -- Drawn by the worker when it starts (a random uuid), unique beyond this database.
    id           uuid        PRIMARY KEY,
    host         text        NOT NULL,
    pid          bigint      NOT NULL,
    -- The version of the jobs crate the worker runs.
    version      text        NOT NULL,
    -- The queues it claims from: [{"queue": "...", "concurrency": N}, ...].
    queues       jsonb       NOT NULL,
    -- The job kinds it runs.
    kinds        text[]      NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    gone_after   interval    NOT NULL
);

-- Throughput: the runs that ended, per minute (database clock), queue and kind, as each worker
-- process counted them in memory and added every few seconds. Each process adds to its own rows
-- only (its id is part of the key), so no two processes ever write the same row; readers sum over
-- workers. Statistics, not the record of any job: a process that dies loses the counts it had not
-- written yet. Retention deletes rows older than two days.
CREATE TABLE jobs_throughput (
    minute    timestamptz NOT NULL,
    queue     text        NOT NULL,
    kind      text        NOT NULL,
    worker_id uuid        NOT NULL,
    done      bigint      NOT NULL DEFAULT 0,
    retried   bigint      NOT NULL DEFAULT 0,
    dead      bigint      NOT NULL DEFAULT 0,
    cancelled bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, queue, kind, worker_id)
);
