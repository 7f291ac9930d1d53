-- What the embedded SQLite store's migrations 0007 to 0009 added:
-- connectors, the prompt-hash index, browser sessions and the runs paging
-- index.

-- A tenant's MCP connectors. The name is unique across the deployment
-- (agent definitions grant tools by connector name), and tenant says whose
-- it is. spec: canonical JSON of transport, endpoint or command, image,
-- auth and network. overlays: the manifest overlay YAML as written.
-- snapshot: the reviewed tool list (canonical JSON) with its hex sha256,
-- empty until the first review.
CREATE TABLE connectors (
  name          text PRIMARY KEY,
  tenant        text NOT NULL,
  spec          bytea NOT NULL,
  overlays      bytea NOT NULL,
  snapshot      bytea NOT NULL DEFAULT '',
  snapshot_hash text NOT NULL DEFAULT '',
  reviewed_by   text NOT NULL DEFAULT '',
  reviewed_at   bigint NOT NULL DEFAULT 0,
  created_at    bigint NOT NULL,
  updated_at    bigint NOT NULL
);
CREATE INDEX connectors_by_tenant ON connectors(tenant, name);

-- Which runs sent which prompt: one row per (prompt hash, run), written in
-- the append transaction of every model_call event, so that
-- ListRuns(PromptHash) finds every run that sent an identical prompt. The
-- hash is kept as 64 lower-case hex digits (the event records
-- "sha256:HEX").
CREATE TABLE run_prompt_hashes (
  prompt_hash text NOT NULL,
  run_id      text NOT NULL,
  PRIMARY KEY (prompt_hash, run_id)
);

-- Logs written before this step get their rows from the events
-- themselves. A payload that is not JSON text names no prompt (each is
-- parsed in its own block, so one bad payload does not stop the rest).
DO $$
DECLARE
  ev record;
  h  text;
BEGIN
  FOR ev IN SELECT run_id, payload FROM events WHERE type = 'model_call' LOOP
    BEGIN
      SELECT CASE WHEN jsonb_typeof(j -> 'prompt_hash') = 'string' THEN j ->> 'prompt_hash' END
        INTO h FROM (SELECT convert_from(ev.payload, 'UTF8')::jsonb AS j) AS p;
    EXCEPTION WHEN others THEN
      h := NULL;
    END;
    IF h LIKE 'sha256:%' THEN
      h := substr(h, 8);
    END IF;
    IF h ~ '^[0-9a-f]{64}$' THEN
      INSERT INTO run_prompt_hashes(prompt_hash, run_id) VALUES (h, ev.run_id) ON CONFLICT DO NOTHING;
    END IF;
  END LOOP;
END $$;

-- Browser sessions of the run viewer (store.Session): the sha256 of the
-- cookie's secret, never the secret, and the principal the credential that
-- signed in gave. Expired rows are deleted by the API server.
CREATE TABLE sessions (
  id_hash    bytea PRIMARY KEY,
  tenant     text NOT NULL,
  user_id    text NOT NULL,
  scopes     text NOT NULL,
  via        text NOT NULL,
  created_at bigint NOT NULL,
  expires_at bigint NOT NULL
);
CREATE INDEX sessions_expiry ON sessions(expires_at);

-- The run viewer pages a tenant's runs newest or oldest first: with the id
-- as the tie-break in the index, that order needs no sort. It serves every
-- lookup runs_by_tenant (tenant, created_at) served, so that one goes.
CREATE INDEX runs_by_tenant_created ON runs(tenant, created_at, id);
DROP INDEX runs_by_tenant;
