CREATE INDEX runs_by_tenant ON runs(tenant, created_at);
DROP INDEX runs_by_tenant_created;
DROP TABLE sessions, run_prompt_hashes, connectors;
