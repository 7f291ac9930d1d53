package tool_test

import (
	"testing"

	"github.com/agentplane/agentplane/tool"
)

// A catalog reviews manifests by their hash: two providers' manifests of
// one name are each reviewed, and the same name with any other text is not.
func TestCatalogReviewsByHash(t *testing.T) {
	parse := func(desc string) *tool.Manifest {
		t.Helper()
		ms, err := tool.ParseManifests("t.yaml", []byte(`name: run_python
description: `+desc+`
tier: 1
timeout_ms: 1000
side_effects: none
input_schema: {type: object, additionalProperties: false}
`))
		if err != nil {
			t.Fatal(err)
		}
		return ms[0]
	}
	a, b, other := parse("one example's"), parse("another example's"), parse("a team's own, unreviewed")
	c := tool.NewCatalog()
	if err := c.Review(a, b); err != nil {
		t.Fatal(err)
	}
	if !c.Reviewed(a) || !c.Reviewed(b) {
		t.Fatal("a reviewed manifest is not reviewed")
	}
	if c.Reviewed(other) {
		t.Fatal("a manifest with another description counts as reviewed")
	}
}
