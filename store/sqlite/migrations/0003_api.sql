-- The HTTP run API: API keys (hashed), idempotency keys, agent ownership by
-- tenant, webhooks with their delivery outbox and attempts, fair claiming
-- across tenants, and indexes that keep claiming cheap when many runs wait.
CREATE TABLE api_keys (
  id          TEXT PRIMARY KEY,
  tenant      TEXT NOT NULL,
  user_id     TEXT NOT NULL,
  name        TEXT NOT NULL DEFAULT '',
  secret_hash BLOB NOT NULL,
  scopes      TEXT NOT NULL DEFAULT '',
  created_at  INTEGER NOT NULL,
  revoked_at  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX api_keys_by_tenant ON api_keys(tenant, created_at);

CREATE TABLE idempotency_keys (
  tenant       TEXT NOT NULL,
  key          TEXT NOT NULL,
  request_hash BLOB NOT NULL,
  run_id       TEXT NOT NULL,
  created_at   INTEGER NOT NULL,
  PRIMARY KEY (tenant, key)
) WITHOUT ROWID;

CREATE TABLE agent_owners (
  agent      TEXT PRIMARY KEY,
  tenant     TEXT NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE INDEX agent_owners_by_tenant ON agent_owners(tenant, agent);

CREATE TABLE webhooks (
  tenant     TEXT PRIMARY KEY,
  url        TEXT NOT NULL,
  secret     TEXT NOT NULL,
  updated_at INTEGER NOT NULL
);

CREATE TABLE webhook_deliveries (
  id              TEXT PRIMARY KEY,
  tenant          TEXT NOT NULL,
  run_id          TEXT NOT NULL,
  event_type      TEXT NOT NULL,
  url             TEXT NOT NULL,
  payload         BLOB NOT NULL,
  status          TEXT NOT NULL,
  attempts        INTEGER NOT NULL DEFAULT 0,
  next_attempt_at INTEGER NOT NULL,
  created_at      INTEGER NOT NULL,
  updated_at      INTEGER NOT NULL,
  last_error      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries(next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_by_tenant ON webhook_deliveries(tenant, run_id, created_at);

CREATE TABLE webhook_attempts (
  delivery_id TEXT NOT NULL,
  n           INTEGER NOT NULL,
  at          INTEGER NOT NULL,
  status_code INTEGER NOT NULL,
  error       TEXT NOT NULL,
  duration_ms INTEGER NOT NULL,
  PRIMARY KEY (delivery_id, n)
) WITHOUT ROWID;

-- notified = 1 once an ended run has been handed to the webhook outbox.
ALTER TABLE runs ADD COLUMN notified INTEGER NOT NULL DEFAULT 0;
UPDATE runs SET notified = 1 WHERE status IN ('completed', 'completed_partial', 'failed', 'cancelled');
CREATE INDEX runs_to_notify ON runs(updated_at)
  WHERE notified = 0 AND status IN ('completed', 'completed_partial', 'failed', 'cancelled');

-- Weighted fair queuing of background runs: each tenant's weight and the
-- virtual finish time of its last claimed run. Tenant '' holds the system
-- virtual time.
CREATE TABLE fair_queue (
  tenant TEXT PRIMARY KEY,
  weight REAL NOT NULL DEFAULT 1,
  finish REAL NOT NULL DEFAULT 0
);

CREATE INDEX runs_open_by_tenant ON runs(tenant, status);
CREATE INDEX runs_by_wake ON runs(status, wake_at);
CREATE INDEX runs_by_lease ON runs(status, lease_expires);
CREATE INDEX signals_unconsumed ON signals(run_id) WHERE consumed = 0;
