-- Compress large values (the audit log's blocks, about 33 KB each, one a
-- batch) with lz4 instead of pglz, the default: measured on those blocks,
-- pglz took about ten times lz4's CPU to compress them, for a larger
-- result. Values already written keep pglz; the server reads either, so a
-- replica running an older release reads both. A server without lz4
-- (built without it, or older than PostgreSQL 14) keeps pglz.
DO $$
BEGIN
    EXECUTE 'ALTER TABLE kv ALTER COLUMN v SET COMPRESSION lz4';
EXCEPTION WHEN feature_not_supported OR syntax_error OR invalid_parameter_value THEN
    NULL;
END
$$;
