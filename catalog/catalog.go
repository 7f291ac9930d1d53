// Package catalog is the single, explicit list of the platform's own tier-1
// tools: Go functions written and reviewed by the platform team. Nothing
// registers itself; a tool that is not added here, or passed to New by the
// program that builds the catalog, does not exist as tier 1.
//
// An example or a team adds its own tier-1 functions (a simulated bank, an
// IT service desk) by handing a Registrar to New — through
// platform.Options.Tools — without editing this package. A Registrar also
// reviews the manifests it ships with its functions (tool.Catalog.Review):
// any other manifest is a source of untrusted text.
package catalog

import (
	"context"
	"encoding/json"

	"github.com/agentplane/agentplane/tool"
)

// A Registrar adds tier-1 functions to a catalog. The catalog refuses a
// name registered twice, so an extension cannot replace a platform tool or
// another extension's.
type Registrar interface {
	Register(c *tool.Catalog) error
}

// New builds the catalog: the platform's own tools, then each extension's,
// in order.
func New(extensions ...Registrar) (*tool.Catalog, error) {
	c := tool.NewCatalog()
	if err := c.Register("echo", echo); err != nil {
		return nil, err
	}
	for _, r := range extensions {
		if err := r.Register(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// echo returns its arguments unchanged: a side-effect-free tool for tests,
// benchmarks and smoke checks.
func echo(_ context.Context, call tool.Call) (tool.Result, error) {
	return tool.Result{Output: json.RawMessage(call.Args)}, nil
}
