package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseDefinition feeds arbitrary bytes to the definition parser. It
// must never panic, and every definition it accepts must survive a round
// trip through canonical JSON with the same hash.
func FuzzParseDefinition(f *testing.F) {
	seed, err := os.ReadFile(filepath.Join("testdata", "card-dispute-v7.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(cardDispute))
	f.Add([]byte("agent: a\nversion: 1\nmodel: {alias: m}\ninstructions: hi\nbudgets: {max_steps: 1, max_input_tokens: 1, max_cost_usd: 0.000001, max_wall_clock: 1d1s}\n"))
	f.Add([]byte("agent: a\npolicies: [{when: x, then: 'deny(\"\\u00e9\")'}]\n"))
	readRef := func(string) ([]byte, error) { return []byte("instructions from a file"), nil }
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseDefinition("fuzz.yaml", data, readRef)
		if err != nil {
			return
		}
		c1 := d.CanonicalJSON()
		d2, err := DefinitionFromJSON(c1)
		if err != nil {
			t.Fatalf("canonical JSON of an accepted definition is rejected: %v\n%s", err, c1)
		}
		if c2 := d2.CanonicalJSON(); !bytes.Equal(c1, c2) || d.Hash() != d2.Hash() {
			t.Fatalf("round trip changed the definition:\n%s\n%s", c1, c2)
		}
	})
}
