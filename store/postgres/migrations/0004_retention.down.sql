DROP TABLE blob_master_key, blob_key_check, erasures, run_payloads_removed, blob_keys;
