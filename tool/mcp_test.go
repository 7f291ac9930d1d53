package tool

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestMCPManifest(t *testing.T) {
	const doc = `
name: get_sum
connector: everything
tier: 2
timeout_ms: 5000
side_effects: none
input_schema: {type: object, properties: {a: {type: number}, b: {type: number}}, required: [a, b]}
mcp:
  tool: get-sum
  output_schema: {type: object, properties: {sum: {type: number}}, required: [sum]}
`
	ms, err := ParseManifests("t.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	m := ms[0]
	if m.MCP == nil || m.MCP.Tool != "get-sum" {
		t.Fatalf("MCP = %+v", m.MCP)
	}
	// The binding survives the canonical form, and with it the hash.
	back, err := ManifestFromJSON(m.CanonicalJSON())
	if err != nil {
		t.Fatal(err)
	}
	if back.Hash() != m.Hash() || back.MCP.Tool != "get-sum" {
		t.Fatalf("round trip changed the manifest: %s", back.CanonicalJSON())
	}
	if err := back.ValidateResult(json.RawMessage(`{"sum":3}`)); err != nil {
		t.Fatalf("valid result refused: %v", err)
	}
	var ae *ArgsError
	if err := back.ValidateResult(json.RawMessage(`{"sum":"three"}`)); !errors.As(err, &ae) {
		t.Fatalf("invalid result: %v", err)
	}
	if err := back.ValidateResult(nil); err == nil {
		t.Fatal("a missing structured result passed a declared output schema")
	}
}

func TestMCPManifestRefused(t *testing.T) {
	base := "name: x\ntimeout_ms: 100\nside_effects: none\ninput_schema: {type: object}\n"
	for _, tc := range []struct{ doc, want string }{
		{base + "tier: 1\nconnector: c\nmcp: {tool: x}\n", "out of process"},
		{base + "tier: 2\nmcp: {tool: x}\n", "connector"},
		{base + "tier: 2\nconnector: c\nmcp: {tool: \"a b\"}\n", "mcp.tool"},
		{base + "tier: 2\nconnector: c\nuntrusted_output: false\nmcp: {tool: x}\n", "untrusted_output"},
		{base + "tier: 2\nconnector: c\nmcp: {tool: x, output_schema: {type: 7}}\n", "output_schema"},
	} {
		_, err := ParseManifests("t.yaml", []byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.doc, err, tc.want)
		}
	}
	// Manifests without mcp keep their canonical form (and hashes).
	ms, err := ParseManifests("t.yaml", []byte(base+"tier: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(ms[0].CanonicalJSON()), "mcp") {
		t.Fatalf("canonical JSON grew an mcp field: %s", ms[0].CanonicalJSON())
	}
}
