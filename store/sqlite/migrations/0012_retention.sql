-- Retention and erasure (docs/design/retention.md).
-- blob_keys: the data key of each blob a tenant stored sealed (package
-- store/blobcrypt), wrapped by the tenant key, and wrapped is NULL once the
-- key is destroyed (reason: expired or erased). A tombstone (object empty)
-- records a removed legacy blob.
CREATE TABLE blob_keys (
  tenant     TEXT NOT NULL,
  sum        BLOB NOT NULL,
  size       INTEGER NOT NULL,
  wrapped    BLOB,
  object     BLOB NOT NULL,
  created_at INTEGER NOT NULL,
  last_put   INTEGER NOT NULL,
  reason     TEXT NOT NULL DEFAULT '',
  removed_at INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (tenant, sum)
) WITHOUT ROWID;

-- The runs whose payloads a purge or an erasure removed.
CREATE TABLE run_payloads_removed (
  run_id TEXT PRIMARY KEY,
  reason TEXT NOT NULL,
  at     INTEGER NOT NULL
) WITHOUT ROWID;

-- Erasures on request, kept with the run until its metadata TTL.
CREATE TABLE erasures (
  id           TEXT PRIMARY KEY,
  tenant       TEXT NOT NULL,
  run_id       TEXT NOT NULL,
  user_id      TEXT NOT NULL DEFAULT '',
  requested_by TEXT NOT NULL DEFAULT '',
  reason       TEXT NOT NULL DEFAULT '',
  at           INTEGER NOT NULL,
  events       INTEGER NOT NULL,
  blobs        INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX erasures_by_run ON erasures(run_id, at);

-- A value derived from the blob master key, so that a process opened with
-- another key is refused at start.
CREATE TABLE blob_key_check (
  id    INTEGER PRIMARY KEY CHECK (id = 1),
  value BLOB NOT NULL
)
