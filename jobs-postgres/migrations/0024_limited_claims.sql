-- Claims of a kind with a limit, counted: one row per kind, which every such claim bumps while it
-- holds the kind's advisory lock (the row lock is held until the claim commits, as the advisory
-- lock is).
--
-- The count lets a claim run as one statement, without a transaction of its own: the statement
-- takes the advisory lock only if it is free, bumps the count, and claims only if the count it
-- bumped is one more than the count its snapshot saw. Otherwise another claim committed after
-- the statement's snapshot was taken (its running jobs would not be counted), and the claim
-- takes nothing; the worker claims again in a transaction that waits for the lock first.

CREATE TABLE jobs_limited_claims (
    kind   text   PRIMARY KEY,
    -- How many times claims of the kind counted themselves since the row was made: once for each
    -- transaction that took the lock (and each claim statement in it), and each statement of its
    -- own that took it, whether or not they took jobs.
    claims bigint NOT NULL
);
