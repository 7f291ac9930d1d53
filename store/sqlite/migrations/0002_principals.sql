CREATE TABLE principals (
  tenant     TEXT NOT NULL,
  user_id    TEXT NOT NULL,
  scopes     TEXT NOT NULL,
  groups_    TEXT NOT NULL,
  bindings   TEXT NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (tenant, user_id)
) WITHOUT ROWID;
