-- A signal's key makes it unique for its run (an approval's decision is
-- keyed by the approval), so the first of racing decisions wins in the
-- database, whichever process received it.
ALTER TABLE signals ADD COLUMN key TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX signals_by_key ON signals(run_id, key) WHERE key != ''
