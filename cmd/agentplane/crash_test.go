package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/catalog"
	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// TestCrashSIGKILL runs scripts/crashtest.sh (50 demo runs, the worker
// SIGKILLed at random points until it finishes on its own) against a freshly
// built binary, then checks the data directory in depth: every run completed;
// every log is contiguous, chained and complete, with the same sequence of
// event types as a run that was never interrupted; re-running the loop over
// each log reproduces it without calling the model or a tool; and the bank
// saw exactly the side effects of one uninterrupted run, per run.
func TestCrashSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test builds the binary and runs 50 runs; skipped with -short")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "agentplane")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "data")
	cmd := exec.Command("bash", "../../scripts/crashtest.sh")
	cmd.Env = append(os.Environ(), "AGENTPLANE_BIN="+bin, "DATA="+data, "RUNS=50")
	out, err := cmd.CombinedOutput()
	t.Logf("crashtest.sh:\n%s", out)
	if err != nil {
		t.Fatalf("crashtest.sh failed: %v", err)
	}
	if !strings.Contains(string(out), "SIGKILLed") {
		t.Fatal("the script did not report its kills")
	}

	ctx := context.Background()
	p, err := platform.Open(ctx, platform.Options{Tools: []catalog.Registrar{openBank(t, data)}, DataDir: data, ModelsFile: filepath.Join(data, "demo", "models.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	runs, err := p.Store.ListRuns(ctx, store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 50 {
		t.Fatalf("%d runs, want 50", len(runs))
	}

	// A reference run, never interrupted, in the same data directory.
	ref, err := p.StartRun(ctx, platform.StartRequest{Agent: "card-dispute-assistant@prod", Task: runs[0].Task, Tenant: runs[0].Tenant, User: runs[0].User})
	if err != nil {
		t.Fatal(err)
	}
	for {
		r, err := p.Engine.Execute(ctx, ref.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != store.StatusWaiting {
			break
		}
		pend, err := p.PendingApprovals(ctx, r.Tenant)
		if err != nil || len(pend) == 0 {
			t.Fatalf("reference run waits without a pending approval (%v)", err)
		}
		for _, a := range pend {
			if err := p.DecideApproval(ctx, platform.DecideRequest{ApprovalID: a.Request.ApprovalID, Decider: "meera@example-bank.in", Decision: "approve"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	refEvs, _ := p.Store.Events(ctx, ref.ID, 0, 0)
	refShape := shape(refEvs)
	refBank, _ := bankOf(p).CountersForRun(ctx, ref.ID)

	for _, r := range runs {
		if r.Status != store.StatusCompleted {
			t.Errorf("run %s: status %s", r.ID, r.Status)
			continue
		}
		rep, err := trace.Verify(ctx, p.Store, r.ID)
		if err != nil || !rep.OK() {
			t.Errorf("run %s: verify %+v %v", r.ID, rep, err)
		}
		evs, _ := p.Store.Events(ctx, r.ID, 0, 0)
		if got := shape(evs); got != refShape {
			t.Errorf("run %s: events differ from an uninterrupted run:\n got %s\nwant %s", r.ID, got, refShape)
		}
		if _, n, err := p.Engine.Verify(ctx, r.ID); err != nil || n != len(evs) {
			t.Errorf("run %s: deterministic re-run consumed %d of %d events: %v", r.ID, n, len(evs), err)
		}
		got, _ := bankOf(p).CountersForRun(ctx, r.ID)
		got.DuplicateCallsSuppressed = 0 // retries after a kill are expected and harmless
		want := refBank
		want.DuplicateCallsSuppressed = 0
		if got != want {
			t.Errorf("run %s: bank saw %+v, an uninterrupted run %+v", r.ID, got, want)
		}
	}
	total, _ := bankOf(p).Counters(ctx)
	t.Logf("bank after 51 runs: %+v", total)
	if total.RefundsIssued != 51*refBank.RefundsIssued {
		t.Errorf("bank issued %d refunds for 51 runs of %d each", total.RefundsIssued, refBank.RefundsIssued)
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
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		tb.Fatal(err)
	}
	b, err := bank.Open(filepath.Join(dataDir, "bank.db"))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// bankOf returns the bank a platform was opened with.
func bankOf(p *platform.Platform) *bank.Bank {
	for _, r := range p.Tools {
		if b, ok := r.(*bank.Bank); ok {
			return b
		}
	}
	panic("platform opened without the bank")
}
