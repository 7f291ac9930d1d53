package tool

import (
	"crypto/sha256"
	"encoding/json"
	"testing"
)

func TestManifestCache(t *testing.T) {
	ms, err := ParseManifests("t.yaml", []byte("name: echo\ndescription: d\ntier: 1\ntimeout_ms: 100\ninput_schema: {type: object, required: [text], properties: {text: {type: string}}}\nside_effects: none\n"))
	if err != nil {
		t.Fatal(err)
	}
	data := ms[0].CanonicalJSON()
	var c ManifestCache
	a, err := c.FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.FromJSON(append([]byte(nil), data...))
	if err != nil || a != b {
		t.Fatalf("the same bytes parsed twice (%p, %p, %v)", a, b, err)
	}
	if err := b.ValidateArgs(json.RawMessage(`{"text": 1}`)); err == nil {
		t.Fatal("the cached manifest lost its schema")
	}
	if _, err := c.FromJSON([]byte(`{"name": "x", "unknown_field": 1}`)); err == nil {
		t.Fatal("a bad manifest was accepted")
	}
	if _, err := c.FromJSON([]byte(`{"name": "x", "unknown_field": 1}`)); err == nil {
		t.Fatal("a bad manifest was accepted the second time")
	}
}

// A cached manifest's hash is computed once; a copy of it that is changed
// has its own.
func TestManifestCacheHash(t *testing.T) {
	ms, err := ParseManifests("t.yaml", []byte("name: echo\ndescription: d\ntier: 1\ntimeout_ms: 100\ninput_schema: {type: object}\nside_effects: none\n"))
	if err != nil {
		t.Fatal(err)
	}
	var c ManifestCache
	m, err := c.FromJSON(ms[0].CanonicalJSON())
	if err != nil {
		t.Fatal(err)
	}
	if m.Hash() != ms[0].Hash() || m.Hash() != sha256.Sum256(m.CanonicalJSON()) {
		t.Fatal("the cached manifest's hash is not the sha256 of its canonical JSON")
	}
	cp := *m
	cp.Description = "changed"
	if cp.Hash() == m.Hash() || cp.Hash() != sha256.Sum256(cp.CanonicalJSON()) {
		t.Fatal("a changed copy of a cached manifest kept the original's hash")
	}
}
