-- Run-level authorisation bindings: argument values a run may act on (for
-- example the one customer a support ticket is about), as canonical JSON.
-- The broker narrows the user's own bindings with them on every call.
ALTER TABLE runs ADD COLUMN bindings TEXT NOT NULL DEFAULT '';
