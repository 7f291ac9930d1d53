package platform_test

import (
	"context"
	"encoding/json"
	"github.com/agentplane/agentplane/runs"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/agentplane/agentplane/catalog"
	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/sandbox/sandboxtest"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// BenchmarkAnalysisStep runs the card-dispute analysis agent end to end:
// get_card_transactions (30,011 rows, 3.5 MB, returned as a handle), then
// run_python comparing them in a gVisor sandbox, then the sandbox's teardown.
// It reports the run's wall time and, from the boundary record, the
// sandbox's provision and wall times and the bytes moved in.
func BenchmarkAnalysisStep(b *testing.B) {
	runsc := sandboxtest.Runsc(b)
	ctx := context.Background()
	dir := b.TempDir()
	writeFiles(b, dir, map[string]string{"agent.yaml": "example:analysis/agent.yaml", "turns.yaml": "example:analysis/turns.yaml",
		"models.yaml": "example:analysis/models.yaml", "run_python.yaml": "example:analysis/run_python.yaml", "tools.yaml": "example:tools.yaml"})
	p, err := platform.Open(ctx, platform.Options{Tools: []catalog.Registrar{openBank(b, filepath.Join(dir, "data"))}, DataDir: filepath.Join(dir, "data"), ModelsFile: filepath.Join(dir, "models.yaml"),
		Sandbox: platform.SandboxOptions{Guest: sandboxtest.BuildGuest(b), Runsc: runsc, StateDir: sandboxtest.StateDir(b)}})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	const tenant, user = "example-bank", "priya@example-bank.in"
	provisionCardDispute(b, p, tenant, map[string][]string{user: {"card-ops-agents"}})
	d := applyExample(b, p, dir, "agent.yaml", "tools.yaml", "run_python.yaml")
	if err := bankOf(p).GenerateTransactions(ctx, bank.CustomerID, 30_000, 2026); err != nil {
		b.Fatal(err)
	}
	var walls, provs, sbWalls []float64
	var bytesIn int64
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		r, err := p.Runs.Start(ctx, runs.StartRequest{Agent: d.Agent, Task: "Check c_88213 for duplicate charges.", Tenant: tenant, User: user})
		if err != nil {
			b.Fatal(err)
		}
		run, err := p.Embedded.Execute(ctx, r.ID)
		if err != nil || run.Status != store.StatusCompleted {
			b.Fatalf("run %v %v", run, err)
		}
		walls = append(walls, float64(time.Since(start).Microseconds())/1000)
		evs, _ := p.Store.Events(ctx, r.ID, 0, 0)
		for _, ev := range evs {
			var res trace.ToolResult
			if ev.Type == trace.EvToolResult && json.Unmarshal(ev.Payload, &res) == nil && res.Sandbox != nil {
				provs = append(provs, float64(res.Sandbox.ProvisionMS))
				sbWalls = append(sbWalls, float64(res.Sandbox.WallMS))
				bytesIn = res.Sandbox.BytesIn
			}
		}
	}
	b.StopTimer()
	if len(provs) != b.N {
		b.Fatalf("%d sandboxed results in %d runs", len(provs), b.N)
	}
	b.ReportMetric(median(walls), "run-p50-ms")
	b.ReportMetric(median(provs), "provision-p50-ms")
	b.ReportMetric(median(sbWalls), "sandbox-wall-p50-ms")
	b.ReportMetric(float64(bytesIn), "bytes-in")
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
