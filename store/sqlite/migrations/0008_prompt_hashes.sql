-- Which runs sent which prompt: one row per (prompt hash, run), filled in
-- the append transaction of every model_call event, so that
-- ListRuns(PromptHash) finds every run that sent an identical prompt. The
-- hash is kept as 64 lower-case hex digits (the event records
-- "sha256:HEX"). The rows of logs written before this migration are filled
-- here, from the events themselves (payloads are JSON text stored as BLOB).
CREATE TABLE run_prompt_hashes (
  prompt_hash TEXT NOT NULL,
  run_id      TEXT NOT NULL,
  PRIMARY KEY (prompt_hash, run_id)
) WITHOUT ROWID;

INSERT OR IGNORE INTO run_prompt_hashes(prompt_hash, run_id)
SELECT hex, run_id FROM (
  SELECT run_id, CASE WHEN substr(h, 1, 7) = 'sha256:' THEN substr(h, 8) ELSE h END AS hex FROM (
    SELECT run_id, json_extract(CAST(payload AS TEXT), '$.prompt_hash') AS h FROM events
    WHERE type = 'model_call' AND json_valid(CAST(payload AS TEXT))
  ) WHERE typeof(h) = 'text'
) WHERE length(hex) = 64 AND hex NOT GLOB '*[^0-9a-f]*';
