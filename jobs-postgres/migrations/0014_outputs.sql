-- Job outputs: the value a job returns (`JobResult<T>`), stored as JSON with the finished job and
-- read back typed (`output_of::<K>`). Written only when a run ends `done` (by the outcome, or by
-- the job's own transaction with `complete_with`); NULL for jobs returning `()` and for every
-- other state. Outputs are at most 256 KiB of JSON (refused before the database otherwise), and
-- retention removes them with their row.
--
-- A nullable column without a default: adding it changes the catalog only, not the rows.
ALTER TABLE jobs_queue ADD COLUMN output jsonb;
