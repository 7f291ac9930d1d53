package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/api/apitest"
	"github.com/agentplane/agentplane/apiclient"
	"github.com/agentplane/agentplane/catalog"
	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// serveProc is `agentplane serve` running as a child process.
type serveProc struct {
	cmd *exec.Cmd
	url string
	log *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startServe(t *testing.T, bin, data string, clockOffset time.Duration) *serveProc {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--data", data, "--models", apitest.ModelsFile(data),
		"--allow-private-webhooks", "--lease-ttl", "2s", "--workers", "4", "--clock-offset", clockOffset.String())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, log: &lockedBuffer{}}
	cmd.Stderr = p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "agentplane: serving "); ok {
				lines <- strings.Fields(u)[0]
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case p.url = <-lines:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("agentplane serve did not start: %s", p.log)
	}
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *serveProc) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
	}
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// pendingOf returns the run's pending approval of tool ("" if none).
func pendingOf(t *testing.T, cl *apiclient.Client, runID, tool string) string {
	t.Helper()
	r, err := cl.GetRun(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range r.PendingApprovals {
		if a.Tool == tool {
			return a.ID
		}
	}
	return ""
}

// TestEndToEndKillRestart drives the card-dispute demo over real HTTP
// against `agentplane serve` as a child process: four async runs each wait
// for a supervisor's approval of the 12,499 INR refund; one is approved,
// one rejected, one edited to 5,000 INR, one left to expire. The server is
// SIGKILLed right after the decisions, while runs wait or resume, and
// restarted a day later (its clock moved 25 hours, so the undecided
// approval expires); it is SIGKILLed again while runs wait for the email
// approval, and restarted. Every run completes; each approval's outcome is
// recorded; every log verifies and re-runs deterministically; the bank's
// counters are exact, per run and in total; and the tenant's webhook
// received, with valid signatures, exactly one message per run.
func TestEndToEndKillRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a server process; skipped with -short")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "agentplane")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/agentplane").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "data")
	ctx := context.Background()

	// The data directory: the demo, two users with keys.
	if err := apitest.WriteDemoFiles(data); err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	func() {
		p, err := platform.Open(ctx, platform.Options{Tools: []catalog.Registrar{openBank(t, data)}, DataDir: data, ModelsFile: apitest.ModelsFile(data)})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if err := apitest.SetupDemo(ctx, p, data); err != nil {
			t.Fatal(err)
		}
		for _, u := range []string{apitest.Priya, apitest.Meera} {
			tok, rec, err := api.NewAPIKey(apitest.BankTenant, u, "e2e", nil, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Store.PutAPIKey(ctx, rec); err != nil {
				t.Fatal(err)
			}
			keys[u] = tok
		}
	}()

	// The tenant's webhook receiver verifies every message.
	var hookMu sync.Mutex
	var verifier *standardwebhooks.Webhook
	received := map[string]map[string]bool{} // run id -> webhook ids accepted
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		hookMu.Lock()
		defer hookMu.Unlock()
		if verifier == nil || verifier.Verify(body, r.Header) != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var msg api.WebhookMessage
		_ = json.Unmarshal(body, &msg)
		if received[msg.Data.RunID] == nil {
			received[msg.Data.RunID] = map[string]bool{}
		}
		received[msg.Data.RunID][r.Header.Get("webhook-id")] = true
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()

	srv := startServe(t, bin, data, 0)
	cl := func(u string) *apiclient.Client { return apiclient.New(srv.url, keys[u]) }
	wh, err := cl(apitest.Priya).PutWebhook(ctx, api.PutWebhookRequest{URL: hook.URL + "/agentplane"})
	if err != nil {
		t.Fatal(err)
	}
	if verifier, err = standardwebhooks.NewWebhook(wh.Secret); err != nil {
		t.Fatal(err)
	}

	outcomes := []string{trace.ApprovalApproved, trace.ApprovalRejected, trace.ApprovalEdited, trace.ApprovalExpired}
	runs := make([]string, len(outcomes))
	for i := range runs {
		r, _, err := cl(apitest.Priya).CreateRun(ctx, api.CreateRunRequest{Agent: apitest.DemoAgent, Input: apitest.DemoTask},
			fmt.Sprintf("e2e-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		runs[i] = r.ID
	}
	refund := make([]string, len(runs))
	for i, id := range runs {
		waitFor(t, "refund approval of "+id, 60*time.Second, func() bool {
			refund[i] = pendingOf(t, cl(apitest.Priya), id, "issue_refund")
			return refund[i] != ""
		})
	}
	meera := cl(apitest.Meera)
	for i, d := range []api.DecideRequest{
		{Decision: "approve", Comment: "matches the statement"},
		{Decision: "reject", Comment: "customer was already refunded by the airline"},
		{Decision: "edit", Args: json.RawMessage(`{"customer_id":"c_88213","transaction_id":"txn_1002","amount_inr":5000,"reason":"partial refund agreed with the customer"}`)},
	} {
		if _, err := meera.Decide(ctx, refund[i], d); err != nil {
			t.Fatalf("decide %s: %v", refund[i], err)
		}
	}
	srv.kill() // runs wait or are resuming: their decisions are stored signals

	// A day later: the undecided approval has expired.
	const later = 25 * time.Hour
	srv = startServe(t, bin, data, later)
	approveEmails := func(want int) {
		done := map[string]bool{}
		waitFor(t, "email approvals", 90*time.Second, func() bool {
			for _, id := range runs {
				if done[id] {
					continue
				}
				if ap := pendingOf(t, cl(apitest.Priya), id, "send_email"); ap != "" {
					if _, err := cl(apitest.Meera).Decide(ctx, ap, api.DecideRequest{Decision: "approve"}); err != nil {
						t.Fatalf("approve email %s: %v", ap, err)
					}
					done[id] = true
				}
			}
			return len(done) >= want
		})
	}
	// Wait until at least two runs wait for their email approval, kill again.
	waitFor(t, "runs waiting for the email approval", 90*time.Second, func() bool {
		n := 0
		for _, id := range runs {
			if pendingOf(t, cl(apitest.Priya), id, "send_email") != "" {
				n++
			}
		}
		return n >= 2
	})
	srv.kill()
	srv = startServe(t, bin, data, later)
	approveEmails(len(runs))
	for _, id := range runs {
		waitFor(t, "run "+id+" to end", 90*time.Second, func() bool {
			r, err := cl(apitest.Priya).GetRun(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return store.Terminal(r.Status)
		})
	}
	waitFor(t, "one webhook message per run", 60*time.Second, func() bool {
		hookMu.Lock()
		defer hookMu.Unlock()
		return len(received) == len(runs)
	})
	srv.kill()
	t.Logf("server logs:\n%s", srv.log)

	// Check everything with the platform in-process.
	p, err := platform.Open(ctx, platform.Options{Tools: []catalog.Registrar{openBank(t, data)}, DataDir: data, ModelsFile: apitest.ModelsFile(data)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	wantBank := []bank.Counters{
		{DisputesRaised: 1, RefundsIssued: 1, RefundedPaise: 1249900, EmailsDrafted: 1, EmailsSent: 1},
		{DisputesRaised: 1, EmailsDrafted: 1, EmailsSent: 1},
		{DisputesRaised: 1, RefundsIssued: 1, RefundedPaise: 500000, EmailsDrafted: 1, EmailsSent: 1},
		{DisputesRaised: 1, EmailsDrafted: 1, EmailsSent: 1},
	}
	var total bank.Counters
	for i, id := range runs {
		r, err := p.Store.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != store.StatusCompleted {
			t.Errorf("run %d (%s) ended %s: %s", i, id, r.Status, r.Result)
		}
		evs, err := p.Store.Events(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		for _, ev := range evs {
			var d trace.ApprovalDecided
			if ev.Type == trace.EvApprovalDec && json.Unmarshal(ev.Payload, &d) == nil && d.ApprovalID == refund[i] {
				got = d.Outcome
			}
		}
		if got != outcomes[i] {
			t.Errorf("run %d: refund approval %s, want %s", i, got, outcomes[i])
		}
		if rep, err := trace.Verify(ctx, p.Store, id); err != nil || !rep.OK() {
			t.Errorf("run %d: trace verify: %+v %v", i, rep, err)
		}
		if v, err := p.Engine.Verify(ctx, id); err != nil || v.Events != len(evs) {
			t.Errorf("run %d: deterministic re-run consumed %d of %d events: %v", i, v.Events, len(evs), err)
		}
		ct, err := bankOf(p).CountersForRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		ct.DuplicateCallsSuppressed = 0 // repeats after a kill are expected and change nothing
		if ct != wantBank[i] {
			t.Errorf("run %d (%s): bank %+v, want %+v", i, outcomes[i], ct, wantBank[i])
		}
		total.RefundsIssued += ct.RefundsIssued
		total.RefundedPaise += ct.RefundedPaise
		hookMu.Lock()
		if len(received[id]) != 1 {
			t.Errorf("run %d: webhook messages with ids %v, want exactly one", i, received[id])
		}
		hookMu.Unlock()
	}
	all, err := bankOf(p).Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if all.RefundsIssued != 2 || all.RefundedPaise != 1249900+500000 || all.DisputesRaised != 4 || all.EmailsSent != 4 {
		t.Errorf("bank in total: %+v, want 2 refunds of 17,499 INR, 4 disputes, 4 emails", all)
	}
	t.Logf("bank: %+v", all)
}
