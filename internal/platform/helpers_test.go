package platform_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/examples/carddispute"
	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/tool"
)

// writeFiles writes files into dir: each value is the file's text, or, when
// it starts with "example:", the embedded card-dispute file it names.
func writeFiles(tb testing.TB, dir string, files map[string]string) {
	tb.Helper()
	for name, body := range files {
		data := []byte(body)
		if src, ok := cutPrefix(body, "example:"); ok {
			var err error
			if data, err = carddispute.ReadFile(src); err != nil {
				tb.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return "", false
}

// applyExample applies tool files and then an agent file from dir.
func applyExample(tb testing.TB, p *platform.Platform, dir string, agentFile string, toolFiles ...string) *agent.Definition {
	tb.Helper()
	ctx := context.Background()
	for _, f := range toolFiles {
		if _, err := p.ApplyTools(ctx, filepath.Join(dir, f)); err != nil {
			tb.Fatal(err)
		}
	}
	d, err := agent.LoadDefinitionFile(filepath.Join(dir, agentFile))
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := p.Registry.Apply(ctx, d); err != nil {
		tb.Fatal(err)
	}
	return d
}

// openBank opens the card-dispute bank in a data directory, as the CLI
// does, for the platform to register its tools (and close it).
func openBank(tb testing.TB, dataDir string) *bank.Bank {
	tb.Helper()
	b, err := bank.OpenIn(dataDir)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// bankOf returns the bank a platform was opened with.
func bankOf(p *platform.Platform) *bank.Bank {
	b := bank.Find(p.Tools)
	if b == nil {
		panic("platform opened without the bank")
	}
	return b
}

// provisionCardDispute gives tenant's users the card-dispute tools' scopes
// and their connectors secrets (platform.Provision).
func provisionCardDispute(tb testing.TB, p *platform.Platform, tenant string, users map[string][]string) {
	tb.Helper()
	data, err := carddispute.ReadFile(carddispute.ToolsFile)
	if err != nil {
		tb.Fatal(err)
	}
	ms, err := tool.ParseManifests(carddispute.ToolsFile, data)
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.Provision(context.Background(), tenant, users, ms); err != nil {
		tb.Fatal(err)
	}
}
