package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/runs"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

var (
	paidMu sync.Mutex
	paid   = map[string][]string{} // run id -> canonical args of executed payments
)

func init() {
	testFuncs["pay"] = func(_ context.Context, c tool.Call) (tool.Result, error) {
		paidMu.Lock()
		paid[c.RunID] = append(paid[c.RunID], string(c.Args))
		paidMu.Unlock()
		return tool.JSONResult(map[string]string{"status": "paid"})
	}
}

func paidIn(runID string) []string {
	paidMu.Lock()
	defer paidMu.Unlock()
	return append([]string(nil), paid[runID]...)
}

const payScript = `
turns:
  - tool_calls: [{name: pay, args: {amount: 500}}]
  - text: finished
`

// manualClock is a clock tests move by hand.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *manualClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// startWaiting runs until the payment waits for approval and returns the run
// and the approval id.
func startWaiting(t *testing.T, f *fixture) (*store.Run, string) {
	t.Helper()
	ctx := context.Background()
	r, err := f.p.Runs.Start(ctx, startReq())
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.p.Embedded.Execute(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != store.StatusWaiting {
		t.Fatalf("status %s, want waiting", got.Status)
	}
	pend, err := f.p.Runs.PendingApprovals(ctx, "t1")
	if err != nil || len(pend) != 1 {
		t.Fatalf("pending approvals = %d (%v), want 1", len(pend), err)
	}
	if got := pend[0].Request; got.Group != "payers" || got.Requester != "alice" || !strings.Contains(got.Description, "amount=500") {
		t.Fatalf("approval request = %+v", got)
	}
	if len(paidIn(r.ID)) != 0 {
		t.Fatal("paid before approval")
	}
	return got, pend[0].Request.ApprovalID
}

func resume(t *testing.T, f *fixture, runID string) (*store.Run, []store.Event) {
	t.Helper()
	ctx := context.Background()
	got, err := f.p.Embedded.Execute(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	evs, _ := f.p.Store.Events(ctx, runID, 0, 0)
	return got, evs
}

func decided(t *testing.T, evs []store.Event) trace.ApprovalDecided {
	t.Helper()
	d := payloads[trace.ApprovalDecided](t, evs, trace.EvApprovalDec)
	if len(d) != 1 {
		t.Fatalf("approval_decided events = %d, want 1", len(d))
	}
	return d[0]
}

func TestApprovalApproveRejectEdit(t *testing.T) {
	cases := []struct {
		name     string
		decision string
		args     string
		comment  string
		outcome  string
		paid     []string
		result   string
	}{
		{"approve", "approve", "", "", trace.ApprovalApproved, []string{`{"amount":500}`}, trace.StatusOK},
		{"reject", "reject", "", "too much", trace.ApprovalRejected, nil, trace.StatusDenied},
		{"edit", "edit", `{"amount": 80}`, "pay 80", trace.ApprovalEdited, []string{`{"amount":80}`}, trace.StatusOK},
		{"edit to invalid arguments is checked again", "edit", `{"amount": "lots"}`, "", trace.ApprovalEdited, nil, trace.StatusInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{script: payScript})
			run, id := startWaiting(t, f)
			err := f.p.Runs.Decide(context.Background(), runs.DecideRequest{ApprovalID: id, Tenant: "t1", Decider: "bob",
				Decision: tc.decision, Args: json.RawMessage(tc.args), Comment: tc.comment})
			if err != nil {
				t.Fatal(err)
			}
			got, evs := resume(t, f, run.ID)
			if got.Status != store.StatusCompleted {
				t.Fatalf("status %s", got.Status)
			}
			d := decided(t, evs)
			if d.Outcome != tc.outcome || d.Decider != "bob" {
				t.Fatalf("decided = %+v", d)
			}
			if p := paidIn(run.ID); strings.Join(p, "|") != strings.Join(tc.paid, "|") {
				t.Fatalf("paid %v, want %v", p, tc.paid)
			}
			res := payloads[trace.ToolResult](t, evs, trace.EvToolResult)[0]
			if res.Status != tc.result {
				t.Fatalf("result status %s, want %s (%s)", res.Status, tc.result, res.Output.Text)
			}
			if tc.comment != "" && tc.decision == "reject" && !strings.Contains(res.Output.Text, tc.comment) {
				t.Fatalf("the model is not told the comment: %s", res.Output.Text)
			}
			// Re-running over the whole log, waits included, reproduces it.
			if v, err := f.p.Engine.Verify(context.Background(), run.ID); err != nil || v.Events != len(evs) {
				t.Fatalf("verify: %d/%d %v", v.Events, len(evs), err)
			}
		})
	}
}

func TestApprovalExpires(t *testing.T) {
	clk := &manualClock{t: time.Unix(1_800_000_000, 0)}
	f := newFixture(t, fixtureOptions{script: payScript, clock: clk.now})
	run, _ := startWaiting(t, f)
	ctx := context.Background()
	// Not yet due: the waiting run is not claimable.
	clk.add(23 * time.Hour)
	if _, err := f.p.Embedded.Execute(ctx, run.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("claim before expiry: %v", err)
	}
	clk.add(2 * time.Hour)
	got, evs := resume(t, f, run.ID)
	if got.Status != store.StatusCompleted {
		t.Fatalf("status %s", got.Status)
	}
	if d := decided(t, evs); d.Outcome != trace.ApprovalExpired {
		t.Fatalf("outcome %s, want expired", d.Outcome)
	}
	res := payloads[trace.ToolResult](t, evs, trace.EvToolResult)[0]
	if res.Status != trace.StatusDenied || !strings.Contains(res.Output.Text, "expired") {
		t.Fatalf("result %+v", res)
	}
	if len(paidIn(run.ID)) != 0 {
		t.Fatal("an expired approval paid")
	}
}

func TestApprovalRefusals(t *testing.T) {
	f := newFixture(t, fixtureOptions{script: payScript})
	run, id := startWaiting(t, f)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		req  runs.DecideRequest
		want error
	}{
		{"requester approves own request", runs.DecideRequest{ApprovalID: id, Decider: "alice", Decision: "approve"}, runs.ErrNotApprover},
		{"decider outside the group", runs.DecideRequest{ApprovalID: id, Decider: "carol", Decision: "approve"}, runs.ErrNotApprover},
		{"another tenant", runs.DecideRequest{ApprovalID: id, Tenant: "t2", Decider: "bob", Decision: "approve"}, store.ErrNotFound},
		{"unknown approval", runs.DecideRequest{ApprovalID: id + "9", Decider: "bob", Decision: "approve"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := f.p.Runs.Decide(ctx, tc.req)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	// A forged signal that binds to other arguments is ignored: the run
	// stays waiting and pays nothing.
	forged, _ := json.Marshal(trace.ApprovalSignal{ApprovalID: id, Decision: "approve", ArgsHash: strings.Repeat("0", 64), Decider: "bob"})
	if err := f.p.Engine.Signal(ctx, run.ID, engine.Signal{Kind: trace.SignalApproval, Payload: forged}); err != nil {
		t.Fatal(err)
	}
	got, _ := resume(t, f, run.ID)
	if got.Status != store.StatusWaiting || len(paidIn(run.ID)) != 0 {
		t.Fatalf("forged approval: status %s, paid %v", got.Status, paidIn(run.ID))
	}
	// Cancel while waiting ends the run, recorded.
	if err := f.p.Engine.Cancel(ctx, run.ID, engine.Cancel{}); err != nil {
		t.Fatal(err)
	}
	got, evs := resume(t, f, run.ID)
	if got.Status != store.StatusCancelled || lastEnd(t, evs).Status != store.StatusCancelled {
		t.Fatalf("after cancel: %s", got.Status)
	}
}

func TestMessageReachesTheModel(t *testing.T) {
	var sawMessage atomic.Bool
	f := newFixture(t, fixtureOptions{script: payScript})
	run, id := startWaiting(t, f)
	ctx := context.Background()
	msg, _ := json.Marshal(map[string]string{"text": "the customer called back"})
	if err := f.p.Engine.Signal(ctx, run.ID, engine.Signal{Kind: trace.SignalMessage, Payload: msg}); err != nil {
		t.Fatal(err)
	}
	if err := f.p.Runs.Decide(ctx, runs.DecideRequest{ApprovalID: id, Decider: "bob", Decision: "approve"}); err != nil {
		t.Fatal(err)
	}
	_, evs := resume(t, f, run.ID)
	err := trace.Prompts(ctx, f.p.Store, evs, func(ev *store.Event, mc *trace.ModelCall, req *modelRequest) error {
		for _, m := range req.Messages {
			for _, p := range m.Content {
				if strings.Contains(p.Text, "the customer called back") {
					sawMessage.Store(true)
				}
			}
		}
		return nil
	})
	if err != nil || !sawMessage.Load() {
		t.Fatalf("the user's message never reached the model (%v)", err)
	}
	if rep, err := trace.Verify(ctx, f.p.Store, run.ID); err != nil || !rep.OK() {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}
