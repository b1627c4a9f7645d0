-- The ledger as an ordered key-value space, exactly as the engine sees it
-- through ledger.Store. Keys are compared bytewise (bytea), which gives the
-- engine's prefix scans their order.
CREATE TABLE IF NOT EXISTS kv (
    k bytea PRIMARY KEY,
    v bytea NOT NULL
);
