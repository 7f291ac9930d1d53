package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/api/apitest"
	"github.com/agentplane/agentplane/engine/temporal/temporaltest"
	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// scenarioEngine starts the demo API on one engine; again starts another
// server on the same data directory and engine, as a restarted process.
type scenarioEngine struct {
	name  string
	start func(t *testing.T, row string) *apitest.Server
	again func(t *testing.T, first *apitest.Server, row string) *apitest.Server
}

// scenario is one row of the card-dispute table: it drives the demo
// through the HTTP API and returns the server it ended on, the run whose
// log, engine verification and bank counters the table then checks, the
// status the run must have ended with, and what the bank must count for it.
type scenario struct {
	name string
	run  func(t *testing.T, s *apitest.Server, restart restartFunc) (final *apitest.Server, id, status string, want bank.Counters)
}

// restartFunc stops a server (its workers and HTTP server, as the end of
// its process would) and starts another on its data directory and engine.
type restartFunc func(*apitest.Server) *apitest.Server

// The bank's counters of a run after each outcome of the refund approval
// (the e-mail approved every time).
var (
	bankApproved = bank.Counters{DisputesRaised: 1, RefundsIssued: 1, RefundedPaise: 1249900, EmailsDrafted: 1, EmailsSent: 1}
	bankEdited   = bank.Counters{DisputesRaised: 1, RefundsIssued: 1, RefundedPaise: 500000, EmailsDrafted: 1, EmailsSent: 1}
	bankNoRefund = bank.Counters{DisputesRaised: 1, EmailsDrafted: 1, EmailsSent: 1}
)

// editedRefund is the supervisor's smaller refund.
const editedRefund = `{"customer_id":"c_88213","transaction_id":"txn_1002","amount_inr":5000,"reason":"partial refund agreed with the customer"}`

var cardDisputeScenarios = []scenario{
	// Streamed: the run is started as an SSE stream and both approvals are
	// decided as the stream shows them. The table's servers poll the store
	// for streams once an hour, so every event reaching the stream, in
	// order, shows that the engine's own appends in this process wake it
	// (on Temporal, the appends its workers' activities make).
	{"both approvals", func(t *testing.T, s *apitest.Server, restart restartFunc) (*apitest.Server, string, string, bank.Counters) {
		id := streamDemo(t, scenarioFixture(t, s), 3*time.Minute)
		return s, id, store.StatusCompleted, bankApproved
	}},
	{"crash mid-run", crashMidRun},
	{"edit", func(t *testing.T, s *apitest.Server, restart restartFunc) (*apitest.Server, string, string, bank.Counters) {
		f := scenarioFixture(t, s)
		id := f.startAsync(priya)
		ap := f.waitPending(priya, id, "issue_refund")
		f.decide(meera, ap.ID, map[string]any{"decision": "edit", "args": json.RawMessage(editedRefund), "comment": "partial refund"})
		f.decide(meera, f.waitPending(priya, id, "send_email").ID, map[string]any{"decision": "approve"})
		f.waitStatus(priya, id, store.StatusCompleted)
		d := decisionOf(t, s.Platform, id, ap.ID)
		if d.Outcome != trace.ApprovalEdited || d.Decider != meera || d.EditedArgs == nil || !strings.Contains(*d.EditedArgs, `"amount_inr":5000`) ||
			d.PreviousArgs == nil || !strings.Contains(*d.PreviousArgs, "12499") {
			t.Fatalf("the log's decision of the edit: %+v", d)
		}
		if d.Recheck == nil || !d.Recheck.Allowed {
			t.Fatalf("the broker did not decide the edited arguments again: %+v", d.Recheck)
		}
		return s, id, store.StatusCompleted, bankEdited
	}},
	{"expiry", func(t *testing.T, s *apitest.Server, restart restartFunc) (*apitest.Server, string, string, bank.Counters) {
		f := scenarioFixture(t, s)
		id := f.startAsync(priya)
		ap := f.waitPending(priya, id, "issue_refund")
		// A day passes on the engines' clock: the 24-hour approval expires.
		s.Clock.Advance(25 * time.Hour)
		f.decide(meera, f.waitPending(priya, id, "send_email").ID, map[string]any{"decision": "approve"})
		f.waitStatus(priya, id, store.StatusCompleted)
		if d := decisionOf(t, s.Platform, id, ap.ID); d.Outcome != trace.ApprovalExpired {
			t.Fatalf("the refund approval was %s, want %s", d.Outcome, trace.ApprovalExpired)
		}
		return s, id, store.StatusCompleted, bankNoRefund
	}},
	{"cancel", func(t *testing.T, s *apitest.Server, restart restartFunc) (*apitest.Server, string, string, bank.Counters) {
		f := scenarioFixture(t, s)
		id := f.startAsync(priya)
		f.waitPending(priya, id, "issue_refund")
		if r := f.do(priya, "POST", "/v1/runs/"+id+":cancel", map[string]any{"reason": "customer withdrew the complaint"}); r.status != http.StatusAccepted {
			t.Fatalf("cancel: %s", r)
		}
		f.waitStatus(priya, id, store.StatusCancelled)
		if !hasSignal(t, f, id, trace.SignalCancel, "customer withdrew") {
			t.Fatal("the cancel is not in the run's log")
		}
		return s, id, store.StatusCancelled, bank.Counters{DisputesRaised: 1}
	}},
	{"replay", func(t *testing.T, s *apitest.Server, restart restartFunc) (*apitest.Server, string, string, bank.Counters) {
		f := scenarioFixture(t, s)
		orig := f.startAsync(priya)
		f.decide(meera, f.waitPending(priya, orig, "issue_refund").ID, map[string]any{"decision": "approve"})
		f.decide(meera, f.waitPending(priya, orig, "send_email").ID, map[string]any{"decision": "approve"})
		f.waitStatus(priya, orig, store.StatusCompleted)
		checkRun(t, s, orig, store.StatusCompleted, bankApproved)
		ctx := context.Background()
		before, err := bankOf(s.Platform).Counters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		replay := f.replayCompleted(priya, orig, 4)
		evs, err := s.Platform.Store.Events(ctx, replay, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		how := map[string]string{}
		for _, ev := range evs {
			var res trace.ToolResult
			if ev.Type == trace.EvToolResult && json.Unmarshal(ev.Payload, &res) == nil {
				how[res.Tool] = res.Replayed
			}
		}
		for _, tool := range []string{"raise_dispute", "issue_refund", "send_email"} {
			if how[tool] != trace.ReplayedRecorded {
				t.Errorf("the replay's %s was answered %q, want %q (all: %v)", tool, how[tool], trace.ReplayedRecorded, how)
			}
		}
		if after, err := bankOf(s.Platform).Counters(ctx); err != nil || after != before {
			t.Fatalf("the replay changed the bank: %+v -> %+v (%v)", before, after, err)
		}
		return s, replay, store.StatusCompleted, bank.Counters{}
	}},
}

// crashMidRun stops the server (its workers, and on Temporal the worker on
// the run's task queue) and starts a new one on the same data directory
// and engine at two points: while the run waits for the refund approval,
// and after the refund was made while it waits for the e-mail approval.
// The run completes and no effect is repeated.
func crashMidRun(t *testing.T, s *apitest.Server, restart restartFunc) (*apitest.Server, string, string, bank.Counters) {
	f := scenarioFixture(t, s)
	id := f.startAsync(priya)
	f.waitPending(priya, id, "issue_refund")
	s = restart(s)
	f = scenarioFixture(t, s)
	f.decide(meera, f.waitPending(priya, id, "issue_refund").ID, map[string]any{"decision": "approve"})
	f.waitPending(priya, id, "send_email")
	if ct, err := bankOf(s.Platform).CountersForRun(context.Background(), id); err != nil || ct.RefundsIssued != 1 {
		t.Fatalf("bank before the second crash: %+v %v, want the refund made", ct, err)
	}
	s = restart(s)
	f = scenarioFixture(t, s)
	f.decide(meera, f.waitPending(priya, id, "send_email").ID, map[string]any{"decision": "approve"})
	f.waitStatus(priya, id, store.StatusCompleted)
	return s, id, store.StatusCompleted, bankApproved
}

// TestCardDisputeScenarios runs the card-dispute demo's scenarios through
// the HTTP API on both engines from one table: both approvals (decided as
// the run's SSE stream shows them, with the streams' store polling off), a crash of
// the workers at two points, an edited refund, an approval expired a day
// later on the engines' clock, a cancel while waiting, and a recorded
// replay from step 4. Every row ends its run as the demo defines, the bank
// counts exactly the effects the row allows (none repeated), the log
// verifies (trace.Verify) and the engine re-runs it without going live
// (Engine.Verify). The Temporal rows share one dev server, each row on its
// own task queue.
func TestCardDisputeScenarios(t *testing.T) {
	// Streams learn of appends only from the engine's wake-ups: the
	// fallback poll and the heartbeats are an hour apart.
	noPoll := func(o *api.Options) { o.StreamPoll, o.Heartbeat = time.Hour, time.Hour }
	embedded := scenarioEngine{name: "embedded",
		start: func(t *testing.T, _ string) *apitest.Server { return apitest.Start(t, apitest.Options{API: noPoll}) },
		again: func(t *testing.T, first *apitest.Server, _ string) *apitest.Server {
			return apitest.Join(t, first, apitest.Options{API: noPoll})
		},
	}
	t.Run("engine=embedded", func(t *testing.T) {
		t.Parallel()
		runScenarios(t, embedded)
	})
	t.Run("engine=temporal", func(t *testing.T) {
		t.Parallel()
		srv := temporaltest.Start(t, temporaltest.Options{})
		onTemporal := func(row string) apitest.Options {
			queue := "scenario-" + strings.ReplaceAll(row, " ", "-")
			url := "temporal://" + srv.HostPort + "?namespace=" + temporaltest.Namespace + "&task_queue=" + queue
			return apitest.Options{API: noPoll, Platform: func(o *platform.Options) { o.Engine = url }}
		}
		runScenarios(t, scenarioEngine{name: "temporal",
			start: func(t *testing.T, row string) *apitest.Server {
				s := apitest.Start(t, onTemporal(row))
				if s.Platform.Embedded != nil {
					t.Fatal("the platform built the embedded engine for a temporal:// engine")
				}
				return s
			},
			again: func(t *testing.T, first *apitest.Server, row string) *apitest.Server {
				return apitest.Join(t, first, onTemporal(row))
			},
		})
	})
}

// runScenarios runs every row of the table on eng, in parallel.
func runScenarios(t *testing.T, eng scenarioEngine) {
	for _, sc := range cardDisputeScenarios {
		t.Run(strings.ReplaceAll(sc.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			restart := func(first *apitest.Server) *apitest.Server {
				first.Stop()
				return eng.again(t, first, sc.name)
			}
			s, id, status, want := sc.run(t, eng.start(t, sc.name), restart)
			checkRun(t, s, id, status, want)
			t.Logf("%s on %s: %v", sc.name, eng.name, time.Since(began).Round(time.Millisecond))
		})
	}
}

// checkRun checks what every row asserts of its run: its status, its
// chain and log (trace.Verify), the engine's deterministic re-run over the
// whole log (Engine.Verify), and the bank's counters for it.
func checkRun(t *testing.T, s *apitest.Server, id, status string, want bank.Counters) {
	t.Helper()
	ctx := context.Background()
	run, err := s.Platform.Store.GetRun(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != status {
		t.Fatalf("run %s ended %s (%s), want %s", id, run.Status, run.Result, status)
	}
	rep, err := trace.Verify(ctx, trace.SourceFor(s.Platform.Store, bankTenant), id)
	if err != nil || !rep.OK() {
		t.Fatalf("trace verify of %s: %+v %v", id, rep, err)
	}
	evs, err := s.Platform.Store.Events(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.Platform.Engine.Verify(ctx, id)
	if err != nil || v.Status != status || v.Events != len(evs) {
		t.Fatalf("engine verify of %s: %+v %v, want %s over all %d events", id, v, err, status, len(evs))
	}
	ct, err := bankOf(s.Platform).CountersForRun(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if ct != want {
		t.Fatalf("bank for %s: %+v, want %+v", id, ct, want)
	}
}

// scenarioFixture drives s with waits bounded for a loaded machine: the
// table's twelve rows run at once.
func scenarioFixture(t *testing.T, s *apitest.Server) *fixture {
	f := fixtureOf(t, s)
	f.wait = 3 * time.Minute
	return f
}

// decisionOf returns the log's decision of the approval.
func decisionOf(t *testing.T, p *platform.Platform, runID, approvalID string) trace.ApprovalDecided {
	t.Helper()
	evs, err := p.Store.Events(context.Background(), runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		var d trace.ApprovalDecided
		if ev.Type == trace.EvApprovalDec && json.Unmarshal(ev.Payload, &d) == nil && d.ApprovalID == approvalID {
			return d
		}
	}
	t.Fatalf("run %s records no decision of approval %s", runID, approvalID)
	return trace.ApprovalDecided{}
}
