package main

import (
	"context"
	"fmt"
	"github.com/agentplane/agentplane/runs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentplane/agentplane/catalog"
	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/examples/helpdesk/desk"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// crashWorld is what a crash test reads of an example's simulated world:
// the counted side effects of one run, or of all runs when runID is "",
// with repeated calls that the idempotency key suppressed left out
// (retries after a kill are expected and harmless).
type crashWorld struct {
	open   func(t *testing.T, dataDir string) catalog.Registrar
	counts func(ctx context.Context, r catalog.Registrar, runID string) (map[string]int, error)
}

var bankWorld = crashWorld{
	open: func(t *testing.T, dataDir string) catalog.Registrar { return openBank(t, dataDir) },
	counts: func(ctx context.Context, r catalog.Registrar, runID string) (map[string]int, error) {
		b := r.(*bank.Bank)
		c, err := b.Counters(ctx)
		if runID != "" {
			c, err = b.CountersForRun(ctx, runID)
		}
		return map[string]int{"disputes": c.DisputesRaised, "refunds": c.RefundsIssued, "refunded_paise": int(c.RefundedPaise),
			"drafted": c.EmailsDrafted, "sent": c.EmailsSent}, err
	},
}

var deskWorld = crashWorld{
	open: func(t *testing.T, dataDir string) catalog.Registrar {
		d, err := desk.Open(filepath.Join(dataDir, "helpdesk.db"))
		if err != nil {
			t.Fatal(err)
		}
		return d
	},
	counts: func(ctx context.Context, r catalog.Registrar, runID string) (map[string]int, error) {
		d := r.(*desk.Desk)
		c, err := d.Counters(ctx)
		if runID != "" {
			c, err = d.CountersForRun(ctx, runID)
		}
		return map[string]int{"mfa_resets": c.MFAResets, "grants": c.Grants, "replies": c.Replies}, err
	},
}

// TestCrashSIGKILL runs scripts/crashtest.sh (50 card-dispute demo runs,
// the worker SIGKILLed at random points until it finishes on its own)
// against a freshly built binary, then checks the data directory in depth
// (checkRecorded).
func TestCrashSIGKILL(t *testing.T) {
	crashTest(t, "card-dispute", 50, "card-dispute-assistant@prod", "meera@example-bank.in", bankWorld)
}

// TestCrashSIGKILLHelpdesk is the same for the helpdesk example, with 20
// runs (each waits once, for IT security's approval of the admin MFA
// reset): its service desk must hold exactly one MFA reset and one reply
// per run, however often the worker was killed.
func TestCrashSIGKILLHelpdesk(t *testing.T) {
	crashTest(t, "helpdesk", 20, "it-helpdesk-assistant@prod", "farah@citycare.example", deskWorld)
}

// crashTest runs the script for an example, then checks its data directory
// (checkRecorded).
func crashTest(t *testing.T, example string, n int, agentRef, approver string, w crashWorld) {
	if testing.Short() {
		t.Skipf("crash test builds the binary and runs %d runs; skipped with -short", n)
	}
	dir := t.TempDir()
	bin := buildBinary(t)
	data := filepath.Join(dir, "data")
	cmd := exec.Command("bash", "../../scripts/crashtest.sh")
	cmd.Env = append(os.Environ(), "AGENTPLANE_BIN="+bin, "DATA="+data, fmt.Sprintf("RUNS=%d", n), "EXAMPLE="+example)
	out, err := cmd.CombinedOutput()
	t.Logf("crashtest.sh:\n%s", out)
	if err != nil {
		t.Fatalf("crashtest.sh failed: %v", err)
	}
	if !strings.Contains(string(out), "SIGKILLed") {
		t.Fatal("the script did not report its kills")
	}

	checkDataDir(t, data, n, example, agentRef, approver, w)
}

// checkDataDir opens the data directory a crash test's processes left
// (with the embedded engine: nothing runs there any more) and checks its n
// runs (checkRecorded).
func checkDataDir(t *testing.T, data string, n int, example, agentRef, approver string, w crashWorld) {
	t.Helper()
	ctx := context.Background()
	world := w.open(t, data)
	p, err := platform.Open(ctx, platform.Options{Tools: []catalog.Registrar{world}, DataDir: data, ModelsFile: filepath.Join(data, "demo", "models.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	recorded, err := p.Store.ListRuns(ctx, store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recorded) != n {
		t.Fatalf("%d runs, want %d", len(recorded), n)
	}
	checkRecorded(t, p, world, w, example, recorded, agentRef, approver)
}

// builtBinary is the agentplane binary the tests of this package run,
// built once per test binary (a link takes tens of seconds on a loaded
// machine) into a directory TestMain removes.
var builtBinary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// buildBinary returns the path of the agentplane binary, building it the
// first time.
func buildBinary(t testing.TB) string {
	t.Helper()
	b := &builtBinary
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "agentplane-bin-"); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "agentplane")
		if out, err := exec.Command("go", "build", "-o", b.path, ".").CombinedOutput(); err != nil {
			b.err = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtBinary.dir != "" {
		os.RemoveAll(builtBinary.dir)
	}
	os.Exit(code)
}

// checkRecorded checks the runs a crash (or many-process) test left in
// p's store: every run completed; every log is contiguous, chained and
// complete, with the same sequence of event types as a run that was never
// interrupted; re-running the loop over each log reproduces it without
// calling the model or a tool; and the example's world saw exactly the
// side effects of one uninterrupted run, per run, and in total (the runs
// plus the reference run, which it executes in p).
func checkRecorded(t *testing.T, p *platform.Platform, world catalog.Registrar, w crashWorld, example string, recorded []*store.Run, agentRef, approver string) {
	t.Helper()
	ctx := context.Background()
	n := len(recorded)

	// A reference run, never interrupted, in the same data directory, its
	// approvals decided as crashtest.sh decides them (with its comment, which
	// the model is told).
	ref, err := p.Runs.Start(ctx, runs.StartRequest{Agent: agentRef, Task: recorded[0].Task, Tenant: recorded[0].Tenant, User: recorded[0].User})
	if err != nil {
		t.Fatal(err)
	}
	for {
		r, err := p.Embedded.Execute(ctx, ref.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != store.StatusWaiting {
			break
		}
		pend, err := p.Runs.PendingApprovals(ctx, r.Tenant)
		if err != nil || len(pend) == 0 {
			t.Fatalf("reference run waits without a pending approval (%v)", err)
		}
		for _, a := range pend {
			if err := p.Runs.Decide(ctx, runs.DecideRequest{ApprovalID: a.Request.ApprovalID, Decider: approver, Decision: "approve", Comment: "crash test"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	refEvs, _ := p.Store.Events(ctx, ref.ID, 0, 0)
	refShape := shape(refEvs)
	want, err := w.counts(ctx, world, ref.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want["refunds"]+want["mfa_resets"] == 0 {
		t.Fatalf("the reference run left no side effect to count: %v", want)
	}

	for _, r := range recorded {
		if r.Status != store.StatusCompleted {
			t.Errorf("run %s: status %s", r.ID, r.Status)
			continue
		}
		rep, err := trace.Verify(ctx, trace.SourceFor(p.Store, r.Tenant), r.ID)
		if err != nil || !rep.OK() {
			t.Errorf("run %s: verify %+v %v", r.ID, rep, err)
		}
		evs, _ := p.Store.Events(ctx, r.ID, 0, 0)
		if got := shape(evs); got != refShape {
			t.Errorf("run %s: events differ from an uninterrupted run:\n got %s\nwant %s", r.ID, got, refShape)
		}
		if v, err := p.Engine.Verify(ctx, r.ID); err != nil || v.Events != len(evs) {
			t.Errorf("run %s: deterministic re-run consumed %d of %d events: %v", r.ID, v.Events, len(evs), err)
		}
		if got, err := w.counts(ctx, world, r.ID); err != nil || !maps.Equal(got, want) {
			t.Errorf("run %s: the world saw %v, an uninterrupted run %v (%v)", r.ID, got, want, err)
		}
	}
	total, err := w.counts(ctx, world, "")
	t.Logf("%s world after %d runs: %v", example, n+1, total)
	for k, v := range want {
		if err != nil || total[k] != (n+1)*v {
			t.Errorf("%s world after %d runs: %s = %d, want %d (%v)", example, n+1, k, total[k], (n+1)*v, err)
		}
	}
}

// shape is the sequence of (type, step) of a log.
func shape(evs []store.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		b.WriteString(ev.Type)
		b.WriteByte('@')
		b.WriteString(string(rune('0' + ev.Step%10)))
		b.WriteByte(' ')
	}
	return b.String()
}

// openBank opens the card-dispute bank in a data directory, as the CLI
// does, for the platform to register its tools (and close it).
func openBank(tb testing.TB, dataDir string) *bank.Bank {
	tb.Helper()
	b, err := bank.Open(filepath.Join(dataDir, "bank.db"))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
