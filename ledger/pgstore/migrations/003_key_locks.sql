-- Key locks (see the package doc, "Concurrency"). lock_keys takes the
-- advisory transaction locks hs, in order, each exclusive where xs says so
-- and shared otherwise. With wait it waits for each; without, a lock held
-- by another session fails the transaction with a serialization failure,
-- so that the store runs the batch again with that key among the locks it
-- waits for first. One SQL statement each way: a loop of PERFORMs costs
-- five times as much per lock.
CREATE OR REPLACE FUNCTION lock_keys(hs bigint[], xs boolean[], wait boolean) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF wait THEN
        PERFORM count(CASE WHEN x THEN pg_advisory_xact_lock(h)::text
                           ELSE pg_advisory_xact_lock_shared(h)::text END)
        FROM unnest(hs, xs) AS u(h, x);
    ELSIF NOT (SELECT bool_and(CASE WHEN x THEN pg_try_advisory_xact_lock(h)
                                    ELSE pg_try_advisory_xact_lock_shared(h) END)
               FROM unnest(hs, xs) AS u(h, x)) THEN
        RAISE EXCEPTION 'ratchet: a ledger key lock is held by another replica'
            USING ERRCODE = 'serialization_failure';
    END IF;
END
$$;
