package toolrun_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/sandbox"
	"github.com/agentplane/agentplane/trace"
)

// spansCode writes n spans (and one forged line) to the file the sandbox
// names in AGENTPLANE_SPANS_FILE, as a program instrumented for it would.
const spansCode = `
import json, os, time
path = os.environ["AGENTPLANE_SPANS_FILE"]
assert os.environ["TRACEPARENT"].startswith("00-")
now = time.time_ns()
with open(path, "a") as f:
    for i in range(N):
        f.write(json.dumps({"name": "work %d" % i, "start_unix_nano": now, "end_unix_nano": now + 1000,
                            "attributes": {"item": i}}) + "\n")
    f.write(json.dumps({"name": "forged", "span_id": "ffffffffffffffff", "start_unix_nano": now, "end_unix_nano": now}) + "\n")
print("done")
`

// TestGuestSpansCrossOnlyThroughTheHost runs programs in a real sandbox
// that emit spans: the boundary record carries what the host accepted, the
// forged line is dropped, the file is emptied after each call (a reused
// sandbox's next call reports none), and a call emits at most
// MaxGuestSpansPerCall.
func TestGuestSpansCrossOnlyThroughTheHost(t *testing.T) {
	e2 := bwrapExecutor(t)
	mf := manifest(t, pythonManifest)
	ctx := context.Background()
	m := sandbox.NewManager(sandbox.ManagerOptions{Executors: map[int]sandbox.Executor{2: e2}, DowngradeTier3: true, Warm: map[int]int{2: -1}})
	m.Start(ctx)
	defer m.Stop()
	b := newBroker(t, m)
	exec := func(n string) *trace.SandboxInfo {
		t.Helper()
		ex, err := b.Execute(ctx, mf, call("run_spans", map[string]any{"code": strings.Replace(spansCode, "range(N)", "range("+n+")", 1)}))
		if err != nil {
			t.Fatal(err)
		}
		if ex.Status != trace.StatusOK || ex.Boundary == nil {
			t.Fatalf("%s %s", ex.Status, ex.Output)
		}
		return ex.Boundary
	}
	bd := exec("3")
	gs := bd.GuestSpans
	if gs == nil || len(gs.Spans) != 3 || gs.Dropped != 1 {
		t.Fatalf("guest spans %+v", gs)
	}
	for i, s := range gs.Spans {
		if s.Parent != -1 || s.Attributes["item"] != int64(i) || s.StartUS < 0 || s.StartUS+s.DurationUS > bd.WallMS*1000+1000 {
			t.Errorf("span %d %+v (wall %d ms)", i, s, bd.WallMS)
		}
	}
	// The same run's next call reuses the sandbox and emits nothing new.
	bd = exec("0")
	if bd.Lifecycle != sandbox.LifecycleReused {
		t.Fatalf("lifecycle %s, want the sandbox reused", bd.Lifecycle)
	}
	if bd.GuestSpans == nil || len(bd.GuestSpans.Spans) != 0 || bd.GuestSpans.Dropped != 1 {
		t.Fatalf("the emptied file was read again: %+v", bd.GuestSpans)
	}
	if bd = exec("100"); len(bd.GuestSpans.Spans) != sandbox.MaxGuestSpansPerCall || bd.GuestSpans.Dropped != 100-sandbox.MaxGuestSpansPerCall+1 {
		t.Fatalf("per-call cap: kept %d, dropped %d", len(bd.GuestSpans.Spans), bd.GuestSpans.Dropped)
	}
}
