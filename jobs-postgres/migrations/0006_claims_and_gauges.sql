-- The gauges' health numbers, counted by one process per interval and read by the others.
CREATE TABLE jobs_gauges (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    counted_at timestamptz NOT NULL DEFAULT '-infinity',
    figures    jsonb
);
INSERT INTO jobs_gauges DEFAULT VALUES;
