-- A tenant's MCP connectors. The name is unique across the deployment (agent
-- definitions grant tools by connector name), and tenant says whose it is.
-- spec: canonical JSON of transport, endpoint or command, image, auth and
-- network. overlays: the manifest overlay YAML as written. snapshot: the
-- reviewed tool list (canonical JSON) with its hex sha256, empty until the
-- first review.
CREATE TABLE connectors (
  name          TEXT PRIMARY KEY,
  tenant        TEXT NOT NULL,
  spec          BLOB NOT NULL,
  overlays      BLOB NOT NULL,
  snapshot      BLOB NOT NULL DEFAULT x'',
  snapshot_hash TEXT NOT NULL DEFAULT '',
  reviewed_by   TEXT NOT NULL DEFAULT '',
  reviewed_at   INTEGER NOT NULL DEFAULT 0,
  created_at    INTEGER NOT NULL,
  updated_at    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX connectors_tenant ON connectors(tenant, name);
