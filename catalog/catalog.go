// Package catalog is the single, explicit list of tier-1 tools compiled into
// agentplane: Go functions written and reviewed by the platform team. Nothing
// registers itself; a tool that is not added here does not exist as tier 1.
// It also lists the manifests the platform team reviewed (the demo's), by
// hash: any other manifest is a source of untrusted text (tool.Catalog.Review).
package catalog

import (
	"context"
	"encoding/json"

	"github.com/agentplane/agentplane/examples/carddispute"
	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/tool"
)

// Options say which optional tool families to include.
type Options struct {
	// Bank, when set, adds the card-dispute demo's simulated core-banking,
	// e-mail and support-desk tools.
	Bank *bank.Bank
}

// New builds the catalog.
func New(o Options) (*tool.Catalog, error) {
	c := tool.NewCatalog()
	if err := c.Register("echo", echo); err != nil {
		return nil, err
	}
	if o.Bank != nil {
		if err := o.Bank.Register(c); err != nil {
			return nil, err
		}
		// The demo's manifests ship with this build and were reviewed with
		// it; the same names with other text are not.
		for _, name := range []string{carddispute.ToolsFile, "analysis/run_python.yaml"} {
			data, err := carddispute.ReadFile(name)
			if err != nil {
				return nil, err
			}
			ms, err := tool.ParseManifests(name, data)
			if err != nil {
				return nil, err
			}
			if err := c.Review(ms...); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

// echo returns its arguments unchanged: a side-effect-free tool for tests,
// benchmarks and smoke checks.
func echo(_ context.Context, call tool.Call) (tool.Result, error) {
	return tool.Result{Output: json.RawMessage(call.Args)}, nil
}
