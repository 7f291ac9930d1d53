-- Browser sessions of the run viewer (store.Session): the sha256 of the
-- cookie's secret, never the secret, and the principal the credential that
-- signed in gave. Expired rows are deleted by the API server.
CREATE TABLE IF NOT EXISTS sessions (
  id_hash    BLOB PRIMARY KEY,
  tenant     TEXT NOT NULL,
  user_id    TEXT NOT NULL,
  scopes     TEXT NOT NULL,
  via        TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS sessions_expiry ON sessions(expires_at);

-- The run viewer pages a tenant's runs newest or oldest first: with the
-- id as the tie-break in the index, that order needs no sort.
CREATE INDEX IF NOT EXISTS runs_by_tenant_created ON runs(tenant, created_at, id)
