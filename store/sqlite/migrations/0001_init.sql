CREATE TABLE runs (
  id             TEXT PRIMARY KEY,
  tenant         TEXT NOT NULL,
  user_id        TEXT NOT NULL,
  agent          TEXT NOT NULL,
  agent_version  INTEGER NOT NULL,
  task           TEXT NOT NULL,
  mode           TEXT NOT NULL,
  status         TEXT NOT NULL,
  created_at     INTEGER NOT NULL,
  updated_at     INTEGER NOT NULL,
  wake_at        INTEGER NOT NULL DEFAULT 0,
  last_seq       INTEGER NOT NULL DEFAULT 0,
  steps          INTEGER NOT NULL DEFAULT 0,
  input_tokens   INTEGER NOT NULL DEFAULT 0,
  output_tokens  INTEGER NOT NULL DEFAULT 0,
  cost_micros    INTEGER NOT NULL DEFAULT 0,
  currency       TEXT NOT NULL DEFAULT '',
  cost_unknown   INTEGER NOT NULL DEFAULT 0,
  result         TEXT NOT NULL DEFAULT '',
  parent_run_id  TEXT NOT NULL DEFAULT '',
  lease_owner    TEXT NOT NULL DEFAULT '',
  lease_expires  INTEGER NOT NULL DEFAULT 0,
  lease_epoch    INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX runs_by_status ON runs(status, mode, created_at);
CREATE INDEX runs_by_tenant ON runs(tenant, created_at);

CREATE TABLE events (
  run_id    TEXT NOT NULL,
  seq       INTEGER NOT NULL,
  type      TEXT NOT NULL,
  step      INTEGER NOT NULL,
  at        INTEGER NOT NULL,
  payload   BLOB NOT NULL,
  prev_hash BLOB NOT NULL,
  hash      BLOB NOT NULL,
  PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;

CREATE TABLE agent_versions (
  name       TEXT NOT NULL,
  version    INTEGER NOT NULL,
  spec       BLOB NOT NULL,
  spec_hash  BLOB NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (name, version)
);

CREATE TABLE aliases (
  agent          TEXT NOT NULL,
  alias          TEXT NOT NULL,
  version        INTEGER NOT NULL,
  canary_version INTEGER NOT NULL DEFAULT 0,
  canary_percent INTEGER NOT NULL DEFAULT 0,
  updated_at     INTEGER NOT NULL,
  PRIMARY KEY (agent, alias)
);

CREATE TABLE tools (
  hash       BLOB PRIMARY KEY,
  name       TEXT NOT NULL,
  manifest   BLOB NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE TABLE tool_heads (
  name TEXT PRIMARY KEY,
  hash BLOB NOT NULL
);

CREATE TABLE signals (
  id         INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id     TEXT NOT NULL,
  kind       TEXT NOT NULL,
  payload    BLOB NOT NULL,
  created_at INTEGER NOT NULL,
  consumed   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX signals_pending ON signals(run_id, consumed);
