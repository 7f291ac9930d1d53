-- Retired agent versions start no new runs (runs pinned to them finish);
-- retired_at is 0 while a version is live.
ALTER TABLE agent_versions ADD COLUMN retired_at INTEGER NOT NULL DEFAULT 0;

-- A tenant's own settings: the domains model text may link to (JSON array
-- of lower-case ASCII domains) and whether callers without the admin scope
-- must start runs through an alias.
CREATE TABLE tenant_settings (
  tenant        TEXT PRIMARY KEY,
  link_domains  TEXT NOT NULL DEFAULT '[]',
  require_alias INTEGER NOT NULL DEFAULT 0,
  updated_at    INTEGER NOT NULL
) WITHOUT ROWID;
