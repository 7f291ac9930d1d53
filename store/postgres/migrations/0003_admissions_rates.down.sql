DROP TABLE rate_calls;
DROP TABLE rate_keys;
DROP TABLE admissions;
DROP TABLE admission_tenants;
