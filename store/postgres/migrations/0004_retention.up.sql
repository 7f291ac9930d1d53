-- Retention and erasure (docs/design/retention.md): the data keys of
-- sealed blobs (wrapped; NULL once destroyed), the runs whose payloads
-- were removed, erasure records, and the check value of the blob master
-- key.
CREATE TABLE blob_keys (
  tenant     text NOT NULL,
  sum        bytea NOT NULL,
  size       bigint NOT NULL,
  wrapped    bytea,
  object     bytea NOT NULL,
  created_at bigint NOT NULL,
  last_put   bigint NOT NULL,
  reason     text NOT NULL DEFAULT '',
  removed_at bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (tenant, sum)
);

CREATE TABLE run_payloads_removed (
  run_id text PRIMARY KEY,
  reason text NOT NULL,
  at     bigint NOT NULL
);

CREATE TABLE erasures (
  id           text PRIMARY KEY,
  tenant       text NOT NULL,
  run_id       text NOT NULL,
  user_id      text NOT NULL DEFAULT '',
  requested_by text NOT NULL DEFAULT '',
  reason       text NOT NULL DEFAULT '',
  at           bigint NOT NULL,
  events       integer NOT NULL,
  blobs        integer NOT NULL
);
CREATE INDEX erasures_by_run ON erasures(run_id, at);

CREATE TABLE blob_key_check (
  id    integer PRIMARY KEY CHECK (id = 1),
  value bytea NOT NULL
);

-- The blob master key, kept here only when no process was given one
-- (AGENTPLANE_BLOB_KEY): then every process sharing the database seals
-- with the same key. Giving the key outside keeps it out of database
-- backups.
CREATE TABLE blob_master_key (
  id    integer PRIMARY KEY CHECK (id = 1),
  value bytea NOT NULL
);
