package tool

import (
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
