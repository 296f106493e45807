-- Dedupe keys of any length: the two unique indexes hold a digest of the key instead of the key
-- itself, which a btree cannot index past about 2.7 kB (keys come from emails, URLs, free text).
-- The row keeps the key; lookups compare the digest through the index, then the key itself.
--
-- The digest is SHA-256 of the key's bytes, written as
-- `sha256(decode(replace(dedupe_key, '\', '\\'), 'escape'))`: `convert_to(dedupe_key, 'UTF8')`
-- gives the same bytes but is not immutable, which an index expression must be; `decode(..,
-- 'escape')` of the key with its backslashes doubled returns exactly the key's bytes and is.
-- SHA-256 rather than MD5: a dedupe key is built from user input, and two keys crafted to share
-- an MD5 would have the second job refused as if its key were held. Statements spell the
-- expression exactly as here (`dedupe_digest!` in sql.rs), so that the planner matches it to
-- these indexes.
DROP INDEX jobs_queue_dedupe_retained;
DROP INDEX jobs_queue_dedupe_active;

CREATE UNIQUE INDEX jobs_queue_dedupe_retained
    ON jobs_queue (kind, sha256(decode(replace(dedupe_key, '\', '\\'), 'escape')))
    WHERE dedupe_scope = 'retained';
CREATE UNIQUE INDEX jobs_queue_dedupe_active
    ON jobs_queue (kind, sha256(decode(replace(dedupe_key, '\', '\\'), 'escape')))
    WHERE dedupe_scope = 'active' AND state IN ('ready', 'running');
