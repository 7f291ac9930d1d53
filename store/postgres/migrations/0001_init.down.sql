DROP TABLE fair_queue, webhook_attempts, webhook_deliveries, webhooks, agent_owners, idempotency_keys,
  api_keys, tenant_settings, principals, signals, tool_heads, tools, aliases, agent_versions, events, runs;
