-- Admission: each tenant's admissions are serialised by a lock on its row
-- of admission_tenants; a run admitted counts as open from the admission
-- until its row exists (or the hold passes).
CREATE TABLE admission_tenants (
  tenant text PRIMARY KEY
);
CREATE TABLE admissions (
  run_id text PRIMARY KEY,
  tenant text NOT NULL,
  admitted_at bigint NOT NULL
);
CREATE INDEX admissions_by_tenant ON admissions(tenant, admitted_at);
-- Rate-limit windows shared by every process: a row per key, locked by a
-- take, and a row per counted call.
CREATE TABLE rate_keys (
  key text PRIMARY KEY
);
CREATE TABLE rate_calls (
  key text NOT NULL,
  at bigint NOT NULL
);
CREATE INDEX rate_calls_by_key ON rate_calls(key, at);
