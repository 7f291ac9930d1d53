package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/runs"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// need skips, or under AGENTPLANE_TEST_STRICT=1 fails, naming what is
// missing and how to get it.
func need(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("AGENTPLANE_TEST_STRICT") == "1" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// serverProc is an e-mail server process seen in /proc.
type serverProc struct {
	pid, uid int
	mntNS    string
}

// emailServers lists the processes running `example-server email`.
func emailServers() []serverProc {
	ents, _ := os.ReadDir("/proc")
	var out []serverProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte("example-server\x00email\x00")) {
			continue
		}
		p := serverProc{pid: pid, uid: -1}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status")); err == nil {
			for _, line := range strings.Split(string(st), "\n") {
				if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
					p.uid, _ = strconv.Atoi(f[1])
				}
			}
		}
		p.mntNS, _ = os.Readlink(filepath.Join("/proc", e.Name(), "ns", "mnt"))
		out = append(out, p)
	}
	return out
}

// TestDemoOverMCP plays the card-dispute demo with the bank's tools
// crossing MCP: core-banking over Streamable HTTP on loopback and e-mail
// over stdio inside a tier-2 sandbox (or, in the http case, over HTTP too).
// Both approvals are asked for and given, the bank's counters are exact,
// the MCP calls are in the log and in `trace`, the log verifies, and a live
// replay runs the read-only tools again over MCP while the side effects
// are answered from the recording (one refund, one e-mail sent, a second
// draft). With stdio the server is seen running as a sandbox uid in
// another mount namespace, never on the host, and gone once the platform
// closes.
func TestDemoOverMCP(t *testing.T) {
	for _, stdio := range []bool{false, true} {
		name := "http"
		if stdio {
			name = "stdio in sandbox"
		}
		t.Run(name, func(t *testing.T) { testDemoOverMCP(t, stdio) })
	}
}

func testDemoOverMCP(t *testing.T, stdio bool) {
	ctx := t.Context()
	// Sandbox uids must traverse the folders above DATA-mcp.
	base, err := os.MkdirTemp("", "agentplane-mcpdemo-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(base, "data")
	spec := &cardDisputeExample.demo
	fdir, err := writeDemoFiles(data, spec)
	if err != nil {
		t.Fatal(err)
	}
	cm := common{data: data, models: filepath.Join(fdir, "models.yaml"), leaseTTL: 15 * time.Second}
	// The e-mail server runs from this test binary, which is agentplane
	// when run under that name (TestMain), as the demo's hard link is.
	if stdio && !findTier2(&cm) {
		need(t, "the e-mail server's tier-2 sandbox needs root, bubblewrap and the sandbox guest (scripts/sandboxes.sh; AGENTPLANE_GUEST)")
	}
	var out, errb bytes.Buffer
	c := &command{ctx: ctx, out: &out, err: &errb}
	// Sessions never idle out during the test: closing the platform must
	// end the stdio servers itself.
	mcpOpts := func(o *platform.Options) {
		demoMCPOptions(data)(o)
		o.MCP.IdleTimeout = time.Hour
	}
	p, err := c.open(&cm, mcpOpts)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			p.Close()
		}
	})
	if stdio {
		if err := tier2Ready(p); err != nil {
			need(t, "tier-2 sandbox unavailable: "+err.Error())
		}
	}
	servers, err := startDemoMCP(data, spec.tenant, stdio)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(servers.Close)
	if _, err := applyDemo(c, p, fdir, spec, servers); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"connector core-banking (MCP over Streamable HTTP at http://127.0.0.1:", "4 tools reviewed"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("setup output lacks %q:\n%s", want, out.String())
		}
	}
	if stdio && !strings.Contains(out.String(), "connector email (MCP over stdio, inside a tier-2 sandbox): 2 tools reviewed") {
		t.Fatalf("setup output:\n%s", out.String())
	}

	// Watch for the e-mail server while the run plays.
	var (
		mu   sync.Mutex
		seen = map[int]serverProc{}
	)
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			for _, sp := range emailServers() {
				mu.Lock()
				seen[sp.pid] = sp
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	run, final, err := c.playDemoRun(p, spec, spec.agent+"@prod", spec.task, false)
	close(stop)
	<-watched
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if final.Status != store.StatusCompleted {
		t.Fatalf("run ended %s\n%s", final.Status, out.String())
	}
	for _, want := range []string{"[waits for approval by card-ops-supervisors]", "[waits for approval by card-ops-agents]",
		"result issue_refund ok", "result send_email ok"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("timeline lacks %q", want)
		}
	}

	// The log: both approvals decided, every call answered.
	results := toolResults(t, p, run.ID)
	if n := countEvents(t, p, run.ID, trace.EvApprovalDec); n != 2 {
		t.Errorf("%d approvals decided in the log, want 2", n)
	}
	for _, name := range bank.ToolNames() {
		if r, ok := results[name]; !ok || r.Status != "ok" {
			t.Errorf("the log has no ok result of %s: %+v", name, r)
		}
	}
	checkCounters(t, data, bank.Counters{DisputesRaised: 1, RefundsIssued: 1, RefundedPaise: 1249900, EmailsDrafted: 1, EmailsSent: 1})

	// A live replay from the start: reads over MCP again, side effects
	// from the recording.
	rp, err := p.Runs.Replay(ctx, runs.ReplayRequest{Of: run.ID, FromStep: 1, Mode: "live"})
	if err != nil {
		t.Fatal(err)
	}
	var after int64
	rfinal, err := c.execute(p, rp.ID, false, &after)
	for i := 0; err == nil && rfinal.Status == store.StatusWaiting && i < 5; i++ {
		pend, _ := p.Runs.PendingApprovals(ctx, spec.tenant)
		for _, a := range pend {
			if err := p.Runs.Decide(ctx, runs.DecideRequest{ApprovalID: a.Request.ApprovalID, Tenant: spec.tenant, Decider: spec.approver, Decision: "approve"}); err != nil {
				t.Fatal(err)
			}
		}
		rfinal, err = c.execute(p, rp.ID, false, &after)
	}
	if err != nil {
		t.Fatal(err)
	}
	if rfinal.Status != store.StatusCompleted {
		t.Fatalf("replay ended %s\n%s", rfinal.Status, out.String())
	}
	checkCounters(t, data, bank.Counters{DisputesRaised: 1, RefundsIssued: 1, RefundedPaise: 1249900, EmailsDrafted: 2, EmailsSent: 1})
	// Side effects from the recording; reads and the draft over MCP again.
	rec, live := trace.ReplayedRecorded, trace.ReplayedLive
	want := map[string]string{bank.ToolRaiseDispute: rec, bank.ToolIssueRefund: rec, bank.ToolSendEmail: rec,
		bank.ToolGetCustomerProfile: live, bank.ToolGetCardTransactions: live, bank.ToolDraftEmail: live}
	for name, r := range toolResults(t, p, rp.ID) {
		if w, ok := want[name]; ok && r.Replayed != w {
			t.Errorf("replay: %s answered %q, want %q", name, r.Replayed, w)
		}
	}

	closed = true
	closeErr := make(chan error, 1)
	go func() { closeErr <- p.Close() }()
	select {
	case err := <-closeErr:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the platform did not close within a minute: it waits on the stdio servers' sessions instead of ending them")
	}
	if stdio {
		self, _ := os.Readlink("/proc/self/ns/mnt")
		mu.Lock()
		procs := seen
		mu.Unlock()
		if len(procs) == 0 {
			t.Fatal("no e-mail server process was seen while the run played")
		}
		for _, sp := range procs {
			if sp.uid == 0 || sp.uid == os.Getuid() || sp.mntNS == "" || sp.mntNS == self {
				t.Errorf("the e-mail server ran outside a sandbox: pid %d uid %d mount namespace %q (ours %q)", sp.pid, sp.uid, sp.mntNS, self)
			}
		}
		// Their sandboxes are destroyed; a process may take a moment to
		// leave /proc.
		for deadline := time.Now().Add(10 * time.Second); len(emailServers()) > 0; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("e-mail servers still running 10s after the platform closed: %+v", emailServers())
			}
		}
	}

	// trace shows the calls, rebuilt from the log; verify is clean.
	var tout, terr bytes.Buffer
	if code := Main(context.Background(), []string{"trace", run.ID, "--data", data}, &tout, &terr); code != 0 {
		t.Fatalf("trace: exit %d: %s", code, terr.String())
	}
	for _, want := range []string{"issue_refund", "send_email", "get_card_transactions", `structured`, `RF-`} {
		if !strings.Contains(tout.String(), want) {
			t.Errorf("trace lacks %q", want)
		}
	}
	tout.Reset()
	if code := Main(context.Background(), []string{"trace", "verify", run.ID, "--data", data}, &tout, &terr); code != 0 {
		t.Fatalf("trace verify: exit %d: %s%s", code, tout.String(), terr.String())
	}
}

// toolResults returns a run's tool results by tool (the last of each).
func toolResults(t *testing.T, p *platform.Platform, runID string) map[string]trace.ToolResult {
	t.Helper()
	evs, err := p.Store.Events(t.Context(), runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]trace.ToolResult{}
	for _, ev := range evs {
		if ev.Type != trace.EvToolResult {
			continue
		}
		var r trace.ToolResult
		if err := json.Unmarshal(ev.Payload, &r); err != nil {
			t.Fatal(err)
		}
		out[r.Tool] = r
	}
	return out
}

func countEvents(t *testing.T, p *platform.Platform, runID, typ string) int {
	t.Helper()
	evs, err := p.Store.Events(t.Context(), runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// checkCounters compares the bank's and the e-mail server's counters,
// summed, with want.
func checkCounters(t *testing.T, data string, want bank.Counters) {
	t.Helper()
	b, err := bank.Open(filepath.Join(data, "bank.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got, err := b.Counters(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	mail, err := openDemoMail(data)
	if err != nil || mail == nil {
		t.Fatalf("the e-mail server's database: %v", err)
	}
	defer mail.Close()
	m, err := mail.Counters(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got.EmailsDrafted+got.EmailsSent != 0 {
		t.Errorf("e-mail reached the in-process bank: %+v", got)
	}
	if got = got.Add(m); got != want {
		t.Errorf("counters %+v, want %+v", got, want)
	}
}
