package api_test

import (
	"strings"
	"testing"

	"github.com/agentplane/agentplane/api"
)

// TestRetentionConfig: a tenant's retention block is validated with the
// tenant and field named, and a valid one is what the purge applies.
func TestRetentionConfig(t *testing.T) {
	_, err := api.ParseConfig("api.yaml", []byte("tenants:\n  acme:\n    retention:\n      payload_ttl: 30 days\n"))
	if err == nil || !strings.Contains(err.Error(), "tenant acme: retention: payload_ttl") {
		t.Fatalf("bad period: %v", err)
	}
	_, err = api.ParseConfig("api.yaml", []byte("tenants:\n  acme:\n    retention:\n      payload_ttl: 30d\n      failed_payload_ttl: 7d\n"))
	if err == nil || !strings.Contains(err.Error(), "failed runs' payloads are kept at least as long") {
		t.Fatalf("failed shorter than default: %v", err)
	}
	cfg, err := api.ParseConfig("api.yaml", []byte("tenants:\n  acme:\n    retention: {payload_ttl: 30d, sample_rate: 0.1, metadata_ttl: 13mo}\n  other:\n    weight: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	pols := cfg.RetentionPolicies()
	if len(pols) != 1 || pols["acme"].PayloadTTL.Days != 30 || pols["acme"].SampledPayloadTTL.Months != 13 {
		t.Fatalf("policies = %+v, want acme's only, sampled runs kept as long as the run", pols)
	}
}
