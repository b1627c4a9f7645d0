-- Leave a fifth of each table page free, so that rewriting a value (an
-- effect record on report, a ceiling counter, the state counts) can stay on
-- its page as a HOT update, without a new index entry.
ALTER TABLE kv SET (fillfactor = 80);
