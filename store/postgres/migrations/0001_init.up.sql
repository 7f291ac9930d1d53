-- The schema of the embedded SQLite store's migrations 0001 to 0006 and
-- 0010 (signal keys) in one step; 0002 adds 0007 to 0009. Blobs are not
-- kept here: the Store takes a store.Blobs (a folder, an S3 bucket). Times
-- are microseconds since the Unix epoch (bigint, 0 = unset), as the event
-- hash chain covers them; hashes are bytea.
CREATE TABLE runs (
  id             text PRIMARY KEY,
  tenant         text NOT NULL,
  user_id        text NOT NULL,
  agent          text NOT NULL,
  agent_version  integer NOT NULL,
  task           text NOT NULL,
  mode           text NOT NULL,
  status         text NOT NULL,
  created_at     bigint NOT NULL,
  updated_at     bigint NOT NULL,
  wake_at        bigint NOT NULL DEFAULT 0,
  last_seq       bigint NOT NULL DEFAULT 0,
  steps          integer NOT NULL DEFAULT 0,
  input_tokens   bigint NOT NULL DEFAULT 0,
  output_tokens  bigint NOT NULL DEFAULT 0,
  cost_micros    bigint NOT NULL DEFAULT 0,
  currency       text NOT NULL DEFAULT '',
  cost_unknown   boolean NOT NULL DEFAULT false,
  result         text NOT NULL DEFAULT '',
  parent_run_id  text NOT NULL DEFAULT '',
  bindings       text NOT NULL DEFAULT '',
  lease_owner    text NOT NULL DEFAULT '',
  lease_expires  bigint NOT NULL DEFAULT 0,
  lease_ttl      bigint NOT NULL DEFAULT 0,
  lease_epoch    bigint NOT NULL DEFAULT 0,
  notified       boolean NOT NULL DEFAULT false
);
CREATE INDEX runs_by_tenant ON runs(tenant, created_at);
CREATE INDEX runs_queued ON runs(mode, created_at) WHERE status = 'queued';
CREATE INDEX runs_by_lease ON runs(lease_expires) WHERE status = 'running';
CREATE INDEX runs_by_wake ON runs(wake_at) WHERE status = 'waiting';
CREATE INDEX runs_open_by_tenant ON runs(tenant, status);
CREATE INDEX runs_to_notify ON runs(updated_at)
  WHERE NOT notified AND status IN ('completed', 'completed_partial', 'failed', 'cancelled');

CREATE TABLE events (
  run_id    text NOT NULL,
  seq       bigint NOT NULL,
  type      text NOT NULL,
  step      integer NOT NULL,
  at        bigint NOT NULL,
  payload   bytea NOT NULL,
  prev_hash bytea NOT NULL,
  hash      bytea NOT NULL,
  PRIMARY KEY (run_id, seq)
);

CREATE TABLE agent_versions (
  name       text NOT NULL,
  version    integer NOT NULL,
  spec       bytea NOT NULL,
  spec_hash  bytea NOT NULL,
  created_at bigint NOT NULL,
  retired_at bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (name, version)
);

CREATE TABLE aliases (
  agent          text NOT NULL,
  alias          text NOT NULL,
  version        integer NOT NULL,
  canary_version integer NOT NULL DEFAULT 0,
  canary_percent integer NOT NULL DEFAULT 0,
  updated_at     bigint NOT NULL,
  PRIMARY KEY (agent, alias)
);

CREATE TABLE tools (
  hash       bytea PRIMARY KEY,
  name       text NOT NULL,
  manifest   bytea NOT NULL,
  created_at bigint NOT NULL
);
CREATE TABLE tool_heads (
  name text PRIMARY KEY,
  hash bytea NOT NULL
);

-- A signal's key makes it unique for its run (an approval's decision is
-- keyed by the approval): the first of racing decisions wins here.
CREATE TABLE signals (
  id         bigserial PRIMARY KEY,
  run_id     text NOT NULL,
  kind       text NOT NULL,
  payload    bytea NOT NULL,
  key        text NOT NULL DEFAULT '',
  created_at bigint NOT NULL,
  consumed   boolean NOT NULL DEFAULT false
);
CREATE INDEX signals_unconsumed ON signals(run_id) WHERE NOT consumed;
CREATE UNIQUE INDEX signals_by_key ON signals(run_id, key) WHERE key <> '';

CREATE TABLE principals (
  tenant     text NOT NULL,
  user_id    text NOT NULL,
  scopes     text NOT NULL,
  groups_    text NOT NULL,
  bindings   text NOT NULL,
  updated_at bigint NOT NULL,
  PRIMARY KEY (tenant, user_id)
);

CREATE TABLE tenant_settings (
  tenant        text PRIMARY KEY,
  link_domains  text NOT NULL DEFAULT '[]',
  require_alias boolean NOT NULL DEFAULT false,
  updated_at    bigint NOT NULL
);

CREATE TABLE api_keys (
  id          text PRIMARY KEY,
  tenant      text NOT NULL,
  user_id     text NOT NULL,
  name        text NOT NULL DEFAULT '',
  secret_hash bytea NOT NULL,
  scopes      text NOT NULL DEFAULT '',
  created_at  bigint NOT NULL,
  revoked_at  bigint NOT NULL DEFAULT 0
);
CREATE INDEX api_keys_by_tenant ON api_keys(tenant, created_at);

CREATE TABLE idempotency_keys (
  tenant       text NOT NULL,
  key          text NOT NULL,
  request_hash bytea NOT NULL,
  run_id       text NOT NULL,
  created_at   bigint NOT NULL,
  PRIMARY KEY (tenant, key)
);

CREATE TABLE agent_owners (
  agent      text PRIMARY KEY,
  tenant     text NOT NULL,
  created_at bigint NOT NULL
);
CREATE INDEX agent_owners_by_tenant ON agent_owners(tenant, agent);

CREATE TABLE webhooks (
  tenant     text PRIMARY KEY,
  url        text NOT NULL,
  secret     text NOT NULL,
  updated_at bigint NOT NULL
);

CREATE TABLE webhook_deliveries (
  id              text PRIMARY KEY,
  tenant          text NOT NULL,
  run_id          text NOT NULL,
  event_type      text NOT NULL,
  url             text NOT NULL,
  payload         bytea NOT NULL,
  status          text NOT NULL,
  attempts        integer NOT NULL DEFAULT 0,
  next_attempt_at bigint NOT NULL,
  created_at      bigint NOT NULL,
  updated_at      bigint NOT NULL,
  last_error      text NOT NULL DEFAULT ''
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries(next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_by_tenant ON webhook_deliveries(tenant, run_id, created_at);

CREATE TABLE webhook_attempts (
  delivery_id text NOT NULL,
  n           integer NOT NULL,
  at          bigint NOT NULL,
  status_code integer NOT NULL,
  error       text NOT NULL,
  duration_ms bigint NOT NULL,
  PRIMARY KEY (delivery_id, n)
);

-- Weighted fair queuing of background runs: each tenant's weight and the
-- virtual finish time of its last claimed run; tenant '' holds the
-- system's virtual time.
CREATE TABLE fair_queue (
  tenant text PRIMARY KEY,
  weight double precision NOT NULL DEFAULT 1,
  finish double precision NOT NULL DEFAULT 0
);
