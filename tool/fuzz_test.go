package tool

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseManifests feeds arbitrary bytes to the manifest parser. It must
// never panic, and every manifest it accepts must survive a round trip
// through canonical JSON unchanged.
func FuzzParseManifests(f *testing.F) {
	seed, err := os.ReadFile(filepath.Join("testdata", "seed-tools.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(refundYAML))
	f.Add([]byte("name: a\ntier: 1\ntimeout_ms: 1\ninput_schema: {type: object, properties: {x: &a {type: string}, y: *a}}\nside_effects: none\n"))
	f.Add([]byte("---\n- 1\n---\nname: [\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := ParseManifests("fuzz.yaml", data)
		if err != nil {
			return
		}
		for _, m := range ms {
			c1 := m.CanonicalJSON()
			m2, err := ManifestFromJSON(c1)
			if err != nil {
				t.Fatalf("canonical JSON of an accepted manifest is rejected: %v\n%s", err, c1)
			}
			if c2 := m2.CanonicalJSON(); !bytes.Equal(c1, c2) {
				t.Fatalf("round trip changed the manifest:\n%s\n%s", c1, c2)
			}
			_ = m.ValidateArgs(json.RawMessage(`{"x":1}`))
		}
	})
}

// FuzzValidateArgs feeds arbitrary arguments to the seed tools' validators
// and approval checks. They must never panic, and arguments that validate
// must be a JSON object.
func FuzzValidateArgs(f *testing.F) {
	ms, err := LoadManifestFile(filepath.Join("testdata", "seed-tools.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	ms = append(ms, func() *Manifest {
		m, err := ParseManifests("refund.yaml", []byte(refundYAML))
		if err != nil {
			f.Fatal(err)
		}
		return m[0]
	}())
	f.Add([]byte(`{"query":"refund policy","max_results":5}`))
	f.Add([]byte(`{"recipients":["a@example.com","b@example.com"],"subject":"x","body":"y"}`))
	f.Add([]byte(`{"transaction_id":"t","amount_inr":12499}`))
	f.Add([]byte(`[{"a":[[[1]]]}]`))
	f.Fuzz(func(t *testing.T, args []byte) {
		for _, m := range ms {
			err := m.ValidateArgs(args)
			m.NeedsApproval(args)
			if err != nil {
				continue
			}
			var obj map[string]json.RawMessage
			if json.Unmarshal(args, &obj) != nil || obj == nil {
				t.Fatalf("%s accepted arguments that are not a JSON object: %q", m.Name, args)
			}
		}
	})
}
