-- Admission: a run admitted against its tenant's quotas counts as open
-- from the admission until its row exists (or the hold passes), so that
-- admissions racing in several processes see one another.
CREATE TABLE admissions (
  run_id TEXT PRIMARY KEY,
  tenant TEXT NOT NULL,
  admitted_at INTEGER NOT NULL
);
CREATE INDEX admissions_by_tenant ON admissions(tenant, admitted_at);
-- Rate-limit windows shared by every process: one row per counted call.
CREATE TABLE rate_calls (
  key TEXT NOT NULL,
  at INTEGER NOT NULL
);
CREATE INDEX rate_calls_by_key ON rate_calls(key, at);
