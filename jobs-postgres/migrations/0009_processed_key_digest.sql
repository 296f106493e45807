-- Processed keys of any length: the primary key is a digest of the key instead of the key
-- itself, which a btree cannot index past about 2.7 kB (keys come from emails, URLs, free text).
-- The row keeps the key. The digest is the one dedupe keys use (migration 6): SHA-256 of the
-- key's bytes, spelled with immutable functions so that a generated column may hold it.
-- Adding a stored generated column rewrites the table, with writes to it locked meanwhile.
ALTER TABLE jobs_processed_keys
    ADD COLUMN key_digest bytea NOT NULL
        GENERATED ALWAYS AS (sha256(decode(replace(key, '\', '\\'), 'escape'))) STORED;
ALTER TABLE jobs_processed_keys
    DROP CONSTRAINT jobs_processed_keys_pkey,
    ADD CONSTRAINT jobs_processed_keys_pkey PRIMARY KEY (key_digest);
