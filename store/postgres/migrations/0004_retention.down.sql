DROP TABLE blob_key_check, erasures, run_payloads_removed, blob_keys;
