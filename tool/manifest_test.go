package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// refundYAML is a valid manifest; the table tests below break it one field
// at a time.
const refundYAML = `name: issue_refund
description: Refund a card transaction.
connector: core-banking
tier: 2
timeout_ms: 5000
input_schema:
  type: object
  properties:
    transaction_id: {type: string}
    amount_inr: {type: number, exclusiveMinimum: 0}
  required: [transaction_id, amount_inr]
  additionalProperties: false
network:
  allow: ["core-banking.internal:8443", "10.0.0.7:443"]
auth:
  mode: on_behalf_of_user
  scopes: [payments:refund, cards:read]
rate_limit: ["10/min per run", "100/day per tenant"]
approval: required_above
approval_threshold: {amount_inr: 10000}
approval_group: card-ops-supervisors
side_effects: external
`

func parseOne(t *testing.T, src string) *Manifest {
	t.Helper()
	ms, err := ParseManifests("tools/refund.yaml", []byte(src))
	if err != nil {
		t.Fatalf("ParseManifests: %v", err)
	}
	if len(ms) != 1 {
		t.Fatalf("got %d manifests, want 1", len(ms))
	}
	return ms[0]
}

func TestParseManifestFields(t *testing.T) {
	m := parseOne(t, refundYAML)
	if m.Name != "issue_refund" || m.Connector != "core-banking" || m.Tier != 2 || m.Timeout() != 5*time.Second {
		t.Errorf("identity fields wrong: %+v", m)
	}
	if want := []string{"10.0.0.7:443", "core-banking.internal:8443"}; !slices.Equal(m.Network.Allow, want) {
		t.Errorf("network.allow = %v, want sorted %v", m.Network.Allow, want)
	}
	if want := []string{"cards:read", "payments:refund"}; m.Auth.Mode != AuthOnBehalfOfUser || !slices.Equal(m.Auth.Scopes, want) {
		t.Errorf("auth = %+v", m.Auth)
	}
	wantRL := []RateLimit{{10, time.Minute, "run"}, {100, 24 * time.Hour, "tenant"}}
	if !slices.Equal(m.RateLimits, wantRL) {
		t.Errorf("rate limits = %v, want %v", m.RateLimits, wantRL)
	}
	if m.Approval != ApprovalRequiredAbove || m.ApprovalThreshold["amount_inr"] != 10000 || m.ApprovalGroup != "card-ops-supervisors" {
		t.Errorf("approval = %q %v %q", m.Approval, m.ApprovalThreshold, m.ApprovalGroup)
	}
	if m.Replayable() {
		t.Error("a tool with external side effects must not be replayable")
	}
	if m.MaxOutput() != DefaultMaxOutputBytes {
		t.Errorf("MaxOutput = %d, want default %d", m.MaxOutput(), DefaultMaxOutputBytes)
	}
	name, desc, schema := m.Def()
	if name != "issue_refund" || desc != "Refund a card transaction." || !json.Valid(schema) {
		t.Errorf("Def = %q %q %s", name, desc, schema)
	}
}

func TestParseManifestDefaults(t *testing.T) {
	m := parseOne(t, `
name: ping
tier: 1
timeout_ms: 100
input_schema: {type: object}
side_effects: none
`)
	if m.Auth.Mode != AuthNone || m.Approval != ApprovalNever || m.MaxOutputBytes != DefaultMaxOutputBytes {
		t.Errorf("defaults not applied: auth %q approval %q max_output %d", m.Auth.Mode, m.Approval, m.MaxOutputBytes)
	}
	if len(m.Network.Allow) != 0 || len(m.RateLimits) != 0 {
		t.Errorf("unexpected network or rate limit: %+v %+v", m.Network, m.RateLimits)
	}
	if !m.Replayable() {
		t.Error("side_effects none must be replayable")
	}
	single := parseOne(t, strings.Replace(refundYAML, `rate_limit: ["10/min per run", "100/day per tenant"]`, `rate_limit: "5/s"`, 1))
	if !slices.Equal(single.RateLimits, []RateLimit{{5, time.Second, "run"}}) {
		t.Errorf("single rate limit = %v", single.RateLimits)
	}
}

// TestParseManifestErrors breaks the valid manifest one way at a time and
// checks that the error names the file, the tool, the field and the problem.
func TestParseManifestErrors(t *testing.T) {
	tests := []struct {
		name     string
		old, new string // replace old with new in refundYAML
		field    string // the error must name this field
		problem  string // and contain this text
	}{
		{"side effects unknown", "side_effects: external", "side_effects: sometimes", "side_effects", `must be one of none, internal, external (got "sometimes")`},
		{"side effects missing", "side_effects: external\n", "", "side_effects", "required"},
		{"name invalid", "name: issue_refund", "name: Issue-Refund", "name", "lower case"},
		{"tier out of range", "tier: 2", "tier: 4", "tier", "must be 1, 2 or 3"},
		{"tier missing", "tier: 2\n", "", "tier", "required"},
		{"tier not a number", "tier: 2", "tier: two", "tier", `expected an integer, got string "two"`},
		{"timeout missing", "timeout_ms: 5000\n", "", "timeout_ms", "required"},
		{"timeout too long", "timeout_ms: 5000", "timeout_ms: 600001", "timeout_ms", "between 1 and 600000"},
		{"schema missing", "input_schema:", "input_schema_gone:", "input_schema_gone", "unknown field"},
		{"schema not object", "  type: object\n  properties", "  type: array\n  properties", "input_schema", `"type" must be "object"`},
		{"schema invalid", "amount_inr: {type: number", "amount_inr: {type: numeral", "input_schema", "invalid JSON Schema"},
		{"schema external ref", "transaction_id: {type: string}", "transaction_id: {$ref: 'file:///etc/passwd'}", "input_schema", "external schema references are not allowed"},
		{"unknown top-level field", "description:", "colour: red\ndescription:", "colour", "unknown field"},
		{"unknown nested field", "  allow:", "  alow:", "network.alow", "unknown field"},
		{"network wildcard", "core-banking.internal:8443", "*.internal:8443", "network.allow[0]", "wildcards are not allowed"},
		{"network no port", "core-banking.internal:8443", "core-banking.internal", "network.allow[0]", "host:port"},
		{"network bad port", "10.0.0.7:443", "10.0.0.7:70000", "network.allow[1]", "port must be"},
		{"network bad host", "core-banking.internal:8443", "core_banking.internal:8443", "network.allow[0]", "DNS name"},
		{"network duplicate", `"10.0.0.7:443"`, `"core-banking.internal:8443"`, "network.allow[1]", "listed twice"},
		{"auth mode", "mode: on_behalf_of_user", "mode: root", "auth.mode", "must be one of none, on_behalf_of_user, service"},
		{"auth scope", "payments:refund", "payments", "auth.scopes[0]", "resource:action"},
		{"on behalf without scopes", "  scopes: [payments:refund, cards:read]\n", "", "auth.scopes", "at least one scope"},
		{"scopes without auth", "mode: on_behalf_of_user", "mode: none", "auth.scopes", "need auth mode"},
		{"rate limit unit", "10/min per run", "10/fortnight per run", "rate_limit[0]", "unknown unit"},
		{"rate limit scope", "100/day per tenant", "100/day per galaxy", "rate_limit[1]", "unknown scope"},
		{"rate limit syntax", `rate_limit: ["10/min per run", "100/day per tenant"]`, `rate_limit: "lots"`, "rate_limit", "want N/unit"},
		{"approval unknown", "approval: required_above", "approval: sometimes", "approval", "must be one of never, always, required_above"},
		{"threshold missing", "approval_threshold: {amount_inr: 10000}\n", "", "approval_threshold", "required with approval required_above"},
		{"threshold without rule", "approval: required_above", "approval: always", "approval_threshold", "only used with approval required_above"},
		{"threshold not a number", "{amount_inr: 10000}", "{amount_inr: lots}", "approval_threshold.amount_inr", "expected a number"},
		{"threshold unknown argument", "{amount_inr: 10000}", "{amount_usd: 100}", "approval_threshold.amount_usd", "could never apply"},
		{"threshold negative", "{amount_inr: 10000}", "{amount_inr: -1}", "approval_threshold.amount_inr", "at least 0"},
		{"approval group", "card-ops-supervisors", "Card Ops", "approval_group", "lower case"},
		{"filesystem", "side_effects: external", "side_effects: external\nfilesystem: persistent", "filesystem", "must be one of none, ephemeral"},
		{"memory range", "side_effects: external", "side_effects: external\nmemory_mb: 70000", "memory_mb", "between 0 and 65536"},
		{"memory on tier 1", "tier: 2", "tier: 1\nmemory_mb: 64", "memory_mb", "cannot be enforced"},
		{"image on tier 1", "tier: 2", "tier: 1\nimage: python:3.12", "image", "tier-2 and tier-3"},
		{"max output negative", "side_effects: external", "side_effects: external\nmax_output_bytes: -1", "max_output_bytes", "between 1 and"},
		{"duplicate key", "tier: 2", "tier: 2\ntier: 3", "tier", "appears twice"},
		{"connector invalid", "connector: core-banking", "connector: Core_Banking", "connector", "lower case"},
		{"untrusted not bool", "side_effects: external", "side_effects: external\nuntrusted_output: maybe", "untrusted_output", "expected true or false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(refundYAML, tt.old, tt.new, 1)
			if src == refundYAML {
				t.Fatalf("test case does not change the manifest (%q not found)", tt.old)
			}
			_, err := ParseManifests("tools/refund.yaml", []byte(src))
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			for _, want := range []string{"tools/refund.yaml", `field "` + tt.field + `"`, tt.problem} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			}
			if tt.field != "name" && !strings.Contains(msg, `tool "issue_refund"`) {
				t.Errorf("error %q does not name the tool", msg)
			}
			var me *ManifestError
			if !errors.As(err, &me) || me.Field != tt.field {
				t.Errorf("ManifestError field = %+v, want %q", me, tt.field)
			}
		})
	}
}

func TestParseManifestErrorFormat(t *testing.T) {
	src := strings.Replace(refundYAML, "side_effects: external", "side_effects: sometimes", 1)
	_, err := ParseManifests("tools/refund.yaml", []byte(src))
	want := `tools/refund.yaml:22: tool "issue_refund": field "side_effects": must be one of none, internal, external (got "sometimes")`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v\nwant    %s", err, want)
	}
}

func TestParseManifestDocuments(t *testing.T) {
	t.Run("missing name names the document", func(t *testing.T) {
		src := "---\n" + refundYAML + "---\n" + strings.Replace(refundYAML, "name: issue_refund\n", "", 1)
		_, err := ParseManifests("tools/x.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), `document 2: field "name": required`) {
			t.Errorf("error = %v", err)
		}
	})
	t.Run("duplicate name", func(t *testing.T) {
		src := refundYAML + "---\n" + refundYAML
		_, err := ParseManifests("tools/x.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), `tool "issue_refund"`) || !strings.Contains(err.Error(), "defined twice (documents 1 and 2)") {
			t.Errorf("error = %v", err)
		}
	})
	t.Run("empty documents are skipped", func(t *testing.T) {
		ms, err := ParseManifests("tools/x.yaml", []byte("---\n---\n"+refundYAML+"---\n# nothing\n"))
		if err != nil || len(ms) != 1 {
			t.Errorf("got %d manifests, err %v", len(ms), err)
		}
	})
	t.Run("empty file", func(t *testing.T) {
		ms, err := ParseManifests("tools/x.yaml", nil)
		if err != nil || len(ms) != 0 {
			t.Errorf("got %d manifests, err %v", len(ms), err)
		}
	})
	t.Run("not a mapping", func(t *testing.T) {
		_, err := ParseManifests("tools/x.yaml", []byte("- a\n- b\n"))
		if err == nil || !strings.Contains(err.Error(), "must be a mapping") {
			t.Errorf("error = %v", err)
		}
	})
	t.Run("syntax error", func(t *testing.T) {
		_, err := ParseManifests("tools/x.yaml", []byte("name: [unclosed\n"))
		if err == nil || !strings.Contains(err.Error(), "tools/x.yaml") {
			t.Errorf("error = %v", err)
		}
	})
	t.Run("every problem reported", func(t *testing.T) {
		src := strings.NewReplacer("tier: 2", "tier: 9", "side_effects: external", "side_effects: often").Replace(refundYAML)
		_, err := ParseManifests("tools/x.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), `field "tier"`) || !strings.Contains(err.Error(), `field "side_effects"`) {
			t.Errorf("error = %v", err)
		}
	})
}

func TestParseManifestLimits(t *testing.T) {
	// An alias repeated many times must not expand into a huge schema.
	bomb := "name: t\ntier: 1\ntimeout_ms: 1\nside_effects: none\ninput_schema:\n  type: object\n  description: &big \"" +
		strings.Repeat("x", 100_000) + "\"\n  examples: [" + strings.Repeat("*big, ", 2000) + "*big]\n"
	_, err := ParseManifests("bomb.yaml", []byte(bomb))
	if err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("alias bomb: %v", err)
	}
	many := strings.Replace(refundYAML, `rate_limit: ["10/min per run", "100/day per tenant"]`,
		"rate_limit: ["+strings.Repeat(`"1/s", `, 70)+`"1/s"]`, 1)
	if _, err := ParseManifests("many.yaml", []byte(many)); err == nil || !strings.Contains(err.Error(), `field "rate_limit": more than 64 entries`) {
		t.Errorf("long list: %v", err)
	}
	if _, err := ParseManifests("huge.yaml", make([]byte, MaxManifestBytes+1)); err == nil {
		t.Error("oversized file accepted")
	}
}

func TestSeedTools(t *testing.T) {
	ms, err := LoadManifestFile(filepath.Join("testdata", "seed-tools.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := NewSet(ms...)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"run_python", "search_internal_docs", "send_customer_email"}; !slices.Equal(set.Names(), want) {
		t.Fatalf("names = %v, want %v", set.Names(), want)
	}
	search, _ := set.Get("search_internal_docs")
	if search.Tier != 1 || !search.Replayable() || !search.UntrustedOutput || search.RateLimits[0] != (RateLimit{60, time.Minute, "run"}) {
		t.Errorf("search_internal_docs = %+v", search)
	}
	py, _ := set.Get("run_python")
	if py.Tier != 3 || py.Filesystem != FilesystemEphemeral || py.MemoryMB != 512 || len(py.Network.Allow) != 0 {
		t.Errorf("run_python = %+v", py)
	}
	email, _ := set.Get("send_customer_email")
	if email.Replayable() || email.Approval != ApprovalRequiredAbove {
		t.Errorf("send_customer_email = %+v", email)
	}
	if need, _ := email.NeedsApproval(json.RawMessage(`{"recipients":["a@x.in"],"subject":"s","body":"b"}`)); need {
		t.Error("one recipient should not need approval")
	}
	if need, why := email.NeedsApproval(json.RawMessage(`{"recipients":["a@x.in","b@x.in"],"subject":"s","body":"b"}`)); !need || !strings.Contains(why, "recipients has 2 items") {
		t.Errorf("two recipients: need %v, reason %q", need, why)
	}
}

func TestCanonicalJSONRoundTrip(t *testing.T) {
	ms, err := LoadManifestFile(filepath.Join("testdata", "seed-tools.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ms = append(ms, parseOne(t, refundYAML))
	for _, m := range ms {
		c1 := m.CanonicalJSON()
		m2, err := ManifestFromJSON(c1)
		if err != nil {
			t.Fatalf("%s: ManifestFromJSON(%s): %v", m.Name, c1, err)
		}
		if c2 := m2.CanonicalJSON(); !bytes.Equal(c1, c2) {
			t.Errorf("%s: round trip changed canonical JSON\n%s\n%s", m.Name, c1, c2)
		}
		if m.Hash() != m2.Hash() {
			t.Errorf("%s: hash changed", m.Name)
		}
		if err := m2.ValidateArgs(json.RawMessage(`{}`)); err == nil && m.Name != "ping" {
			// every seed tool has a required argument
			t.Errorf("%s: schema not compiled after round trip", m.Name)
		}
	}
	// Field order and spelling of defaults do not change the hash.
	a := parseOne(t, "name: t\ntier: 1\ntimeout_ms: 5\ninput_schema: {type: object}\nside_effects: none\n")
	b := parseOne(t, "side_effects: none\napproval: never\nauth: {mode: none}\ninput_schema: {type: object}\ntimeout_ms: 5\ntier: 1\nname: t\nmax_output_bytes: 16384\n")
	if a.Hash() != b.Hash() {
		t.Errorf("equivalent manifests hash differently:\n%s\n%s", a.CanonicalJSON(), b.CanonicalJSON())
	}
	c := parseOne(t, "name: t\ntier: 1\ntimeout_ms: 6\ninput_schema: {type: object}\nside_effects: none\n")
	if a.Hash() == c.Hash() {
		t.Error("different manifests hash the same")
	}
}

func TestManifestFromJSONRejects(t *testing.T) {
	good := parseOne(t, refundYAML).CanonicalJSON()
	tests := map[string]string{
		"unknown field":   strings.Replace(string(good), `"tier":2`, `"tier":2,"colour":"red"`, 1),
		"invalid tier":    strings.Replace(string(good), `"tier":2`, `"tier":7`, 1),
		"trailing data":   string(good) + "{}",
		"no side effects": strings.Replace(string(good), `"side_effects":"external",`, ``, 1),
	}
	for name, src := range tests {
		if src == string(good) {
			t.Fatalf("%s: case does not change the input", name)
		}
		if _, err := ManifestFromJSON([]byte(src)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestLoadManifestDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b.yml", strings.Replace(refundYAML, "issue_refund", "raise_dispute", 1))
	write("a.yaml", refundYAML)
	write("notes.txt", "not a manifest")
	ms, err := LoadManifestDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Name != "issue_refund" || ms[1].Name != "raise_dispute" {
		t.Fatalf("loaded %d manifests in wrong order", len(ms))
	}
	write("c.yaml", refundYAML)
	_, err = LoadManifestDir(dir)
	if err == nil || !strings.Contains(err.Error(), "c.yaml") || !strings.Contains(err.Error(), "already defined in") {
		t.Errorf("duplicate across files: %v", err)
	}
}

func TestSet(t *testing.T) {
	m := parseOne(t, refundYAML)
	if _, err := NewSet(m, m); err == nil || !strings.Contains(err.Error(), `"issue_refund" given twice`) {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := NewSet(&Manifest{Name: "hand_made"}); err == nil {
		t.Error("a manifest without a compiled schema was accepted")
	}
	tier1 := parseOne(t, "name: lookup\ntier: 1\ntimeout_ms: 10\ninput_schema: {type: object}\nside_effects: none\n")
	set, err := NewSet(m, tier1)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := set.Get("lookup"); !ok || got != tier1 {
		t.Error("Get(lookup) failed")
	}
	if _, ok := set.Get("missing"); ok {
		t.Error("Get(missing) succeeded")
	}
	cat := NewCatalog()
	if err := set.CheckCatalog(cat); err == nil || !strings.Contains(err.Error(), `tool "lookup" is tier 1`) {
		t.Errorf("CheckCatalog without function: %v", err)
	}
	if err := cat.Register("lookup", func(ctx context.Context, c Call) (Result, error) { return Result{}, nil }); err != nil {
		t.Fatal(err)
	}
	if err := set.CheckCatalog(cat); err != nil {
		t.Errorf("CheckCatalog with function: %v", err)
	}
}

func TestParseRateLimit(t *testing.T) {
	good := map[string]RateLimit{
		"60/min per run":       {60, time.Minute, "run"},
		"10/s per user":        {10, time.Second, "user"},
		"1000/hour per tenant": {1000, time.Hour, "tenant"},
		"5/day":                {5, 24 * time.Hour, "run"},
		" 3 / second ":         {3, time.Second, "run"},
		"7/h per user":         {7, time.Hour, "user"},
		"8/sec per tenant":     {8, time.Second, "tenant"},
		"9/minute":             {9, time.Minute, "run"},
	}
	for in, want := range good {
		got, err := ParseRateLimit(in)
		if err != nil || got != want {
			t.Errorf("ParseRateLimit(%q) = %v, %v; want %v", in, got, err, want)
			continue
		}
		again, err := ParseRateLimit(got.String())
		if err != nil || again != got {
			t.Errorf("String %q does not parse back: %v %v", got.String(), again, err)
		}
	}
	for _, in := range []string{"", "60", "0/min", "-1/min", "60/week", "60/min per galaxy", "60/min for run", "1/min per run extra", "99999999999/s"} {
		if _, err := ParseRateLimit(in); err == nil {
			t.Errorf("ParseRateLimit(%q) accepted", in)
		}
	}
}
