package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// TestMessagesAndCancel: a message reaches a waiting run's log (and the
// run keeps waiting for its approval); a cancel ends the run at its next
// step boundary, recorded, with nothing refunded; an ended run refuses both.
func TestMessagesAndCancel(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	id := f.startAsync(priya)
	f.waitPending(priya, id, "issue_refund")
	if r := f.do(priya, "POST", "/v1/runs/"+id+"/messages", map[string]any{"text": "The customer called: she booked once."}); r.status != http.StatusAccepted {
		t.Fatalf("message: %s", r)
	}
	if r := f.do(priya, "POST", "/v1/runs/"+id+"/messages", map[string]any{"text": "  "}); r.status != http.StatusBadRequest {
		t.Fatalf("empty message: %s", r)
	}
	// The message wakes the run, which records it and waits again.
	deadline := time.Now().Add(10 * time.Second)
	for !hasSignal(t, f, id, trace.SignalMessage, "she booked once") {
		if time.Now().After(deadline) {
			t.Fatal("the message never reached the run's log")
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.waitPending(priya, id, "issue_refund")

	if r := f.do(priya, "POST", "/v1/runs/"+id+":cancel", map[string]any{"reason": strings.Repeat("x", 4097)}); r.status != http.StatusBadRequest {
		t.Fatalf("a 4 KiB+ reason: %s, want 400", r)
	}
	// A secret pasted into the reason is recorded as its placeholder.
	if r := f.do(priya, "POST", "/v1/runs/"+id+":cancel", map[string]any{"reason": "customer withdrew the complaint; password=hunter2-rotated-77"}); r.status != http.StatusAccepted {
		t.Fatalf("cancel: %s", r)
	}
	run := f.waitStatus(priya, id, store.StatusCancelled)
	if !hasSignal(t, f, id, trace.SignalCancel, "customer withdrew") {
		t.Fatal("the cancel is not in the run's log")
	}
	if raw := f.do(priya, "GET", "/v1/runs/"+id+"/events", nil); strings.Contains(string(raw.body), "hunter2-rotated-77") {
		t.Fatal("the secret in the cancel's reason reached the run's log")
	}
	var evs api.EventList
	f.do(priya, "GET", "/v1/runs/"+id+"/events", nil).decode(t, &evs)
	if last := evs.Events[len(evs.Events)-1]; last.Type != trace.EvRunFailed || !strings.Contains(string(last.Payload), "cancelled") {
		t.Fatalf("last event = %s %s", last.Type, last.Payload)
	}
	if run.PendingApprovals != nil {
		t.Fatalf("a cancelled run lists pending approvals: %+v", run.PendingApprovals)
	}
	var ap api.Approval
	f.do(priya, "GET", "/v1/approvals/"+trace.ApprovalID(id, 4, 0), nil).decode(t, &ap)
	if ap.Status != "withdrawn" {
		t.Fatalf("approval of a cancelled run is %s", ap.Status)
	}
	ct, _ := bankOf(f.p).CountersForRun(context.Background(), id)
	if ct.RefundsIssued != 0 {
		t.Fatalf("a cancelled run refunded: %+v", ct)
	}
	for path, body := range map[string]any{"/v1/runs/" + id + ":cancel": map[string]any{"reason": "x"}, "/v1/runs/" + id + "/messages": map[string]any{"text": "x"}} {
		if r := f.do(priya, "POST", path, body); r.status != http.StatusConflict {
			t.Errorf("POST %s on an ended run: %s", path, r)
		}
	}
	if r := f.do(meera, "POST", "/v1/approvals/"+ap.ID+":decide", map[string]any{"decision": "approve"}); r.status != http.StatusConflict {
		t.Errorf("deciding a withdrawn approval: %s", r)
	}
}

func hasSignal(t *testing.T, f *fixture, runID, kind, text string) bool {
	t.Helper()
	evs, err := f.p.Store.Events(context.Background(), runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		var sg trace.Signal
		if ev.Type == trace.EvSignal && json.Unmarshal(ev.Payload, &sg) == nil && sg.Kind == kind && strings.Contains(string(sg.Payload), text) {
			return true
		}
	}
	return false
}

// TestQuotas: admission refuses with 429 and a body naming the quota when
// a tenant has too many open runs or has spent its daily or monthly cap;
// other tenants are not affected.
func TestQuotas(t *testing.T) {
	f := newFixture(t, fixtureOptions{config: `
tenants:
  example-bank: {max_concurrent_runs: 2}
  globex: {daily_cost: 0.5 INR}
`})
	a := f.startAsync(priya)
	f.startAsync(priya)
	r := f.do(priya, "POST", "/v1/runs", map[string]any{"agent": demoAgent, "input": demoTask, "mode": "async"})
	var e struct {
		Error struct {
			Code, Quota, Limit, Used, Message string
		}
	}
	r.decode(t, &e)
	if r.status != http.StatusTooManyRequests || e.Error.Code != "quota_exceeded" || e.Error.Quota != "concurrent_runs" ||
		e.Error.Limit != "2" || e.Error.Used != "2" || !strings.Contains(e.Error.Message, "open runs") {
		t.Fatalf("third run: %s", r)
	}
	// A refused request with an idempotency key does not burn the key.
	if r := f.do(priya, "POST", "/v1/runs", map[string]any{"agent": demoAgent, "input": demoTask, "mode": "async"}, "Idempotency-Key", "k1"); r.status != 429 {
		t.Fatalf("with a key: %s", r)
	}
	f.waitPending(priya, a, "issue_refund")
	if r := f.do(priya, "POST", "/v1/runs/"+a+":cancel", nil); r.status != http.StatusAccepted {
		t.Fatalf("cancel: %s", r)
	}
	f.waitStatus(priya, a, store.StatusCancelled)
	if r := f.do(priya, "POST", "/v1/runs", map[string]any{"agent": demoAgent, "input": "other input", "mode": "async"}, "Idempotency-Key", "k1"); r.status != http.StatusAccepted {
		t.Fatalf("after a run ended, with the key refused before: %s", r)
	}

	// globex: the first run is admitted and spends more than the cap.
	g := f.startAsync(gus)
	f.waitPending(gus, g, "issue_refund")
	r = f.do(gus, "POST", "/v1/runs", map[string]any{"agent": demoAgent, "input": demoTask, "mode": "async"})
	r.decode(t, &e)
	if r.status != http.StatusTooManyRequests || e.Error.Quota != "daily_cost" || e.Error.Limit != "0.500000 INR" || r.header.Get("Retry-After") == "" {
		t.Fatalf("over the daily cap: %s (Retry-After %q)", r, r.header.Get("Retry-After"))
	}
	var tn api.Tenant
	f.do(gus, "GET", "/v1/tenant", nil).decode(t, &tn)
	if tn.Limits.DailyCost != "0.5 INR" || tn.Usage.DailyCost["INR"] <= 500_000 || tn.Usage.OpenRuns != 1 {
		t.Fatalf("tenant = %+v", tn)
	}
	// The next UTC day the cap has room again.
	f.clock.Advance(24 * time.Hour)
	if r := f.do(gus, "POST", "/v1/runs", map[string]any{"agent": demoAgent, "input": demoTask, "mode": "async"}); r.status != http.StatusAccepted {
		t.Fatalf("the next day: %s", r)
	}
}

// TestAgentsOverHTTP: versions are created over HTTP (identical content is
// a no-op, changed content under a stored version a conflict), an alias
// with a canary sends a deterministic share of new runs to the canary, and
// platform agents cannot be changed through the API.
func TestAgentsOverHTTP(t *testing.T) {
	f := newFixture(t, fixtureOptions{apiOptions: func(o *api.Options) { o.NoWorkers = true }})
	v1 := otherAgentYAML(t, f.dir, "dispute-bot", 1)
	v2 := otherAgentYAML(t, f.dir, "dispute-bot", 2)
	if r := f.do(priya, "POST", "/v1/agents/dispute-bot/versions", v1); r.status != http.StatusCreated {
		t.Fatalf("v1: %s", r)
	}
	var av api.AgentVersion
	r := f.do(priya, "POST", "/v1/agents/dispute-bot/versions", v1)
	r.decode(t, &av)
	if r.status != http.StatusOK || av.Created || av.Version != 1 {
		t.Fatalf("v1 again: %s", r)
	}
	if r := f.do(priya, "POST", "/v1/agents/dispute-bot/versions", strings.Replace(v1, "max_steps: 40", "max_steps: 41", 1)); r.status != http.StatusConflict {
		t.Fatalf("changed v1: %s", r)
	}
	if r := f.do(priya, "POST", "/v1/agents/dispute-bot/versions", v2); r.status != http.StatusCreated {
		t.Fatalf("v2: %s", r)
	}
	if r := f.do(priya, "POST", "/v1/agents/other-name/versions", v2); r.status != http.StatusBadRequest {
		t.Fatalf("path and definition disagree: %s", r)
	}
	if r := f.do(priya, "POST", "/v1/agents/dispute-bot/versions", "agent: dispute-bot\nversion: 3\n"); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("invalid definition: %s", r)
	}
	if r := f.do(priya, "POST", "/v1/agents/"+demoAgent+"/versions", otherAgentYAML(t, f.dir, demoAgent, 9)); r.status != http.StatusConflict {
		t.Fatalf("a platform agent: %s", r)
	}
	r = f.do(priya, "PUT", "/v1/agents/dispute-bot/aliases/prod", map[string]any{"version": 1, "canary": map[string]any{"version": 2, "percent": 30}})
	var al api.Alias
	r.decode(t, &al)
	if r.status != http.StatusOK || al.Version != 1 || al.Canary == nil || al.Canary.Version != 2 || al.Canary.Percent != 30 {
		t.Fatalf("alias: %s", r)
	}
	if r := f.do(priya, "PUT", "/v1/agents/dispute-bot/aliases/prod", map[string]any{"version": 7}); r.status != http.StatusNotFound {
		t.Fatalf("alias to a missing version: %s", r)
	}
	var ag api.Agent
	f.do(priya, "GET", "/v1/agents/dispute-bot", nil).decode(t, &ag)
	if len(ag.Versions) != 2 || ag.Platform {
		t.Fatalf("agent = %+v", ag)
	}
	var list api.AgentList
	f.do(priya, "GET", "/v1/agents", nil).decode(t, &list)
	if len(list.Agents) != 2 { // dispute-bot and the platform's demo agent
		t.Fatalf("agents = %+v", list.Agents)
	}
	var gv api.AgentVersion
	f.do(priya, "GET", "/v1/agents/dispute-bot/versions/2", nil).decode(t, &gv)
	if gv.Version != 2 || len(gv.Definition) == 0 {
		t.Fatalf("version 2 = %+v", gv)
	}

	canary := 0
	for range 60 {
		var run api.Run
		r := f.do(priya, "POST", "/v1/runs", map[string]any{"agent": "dispute-bot", "input": "x", "mode": "async"})
		r.decode(t, &run)
		want := 1
		if agent.CanaryBucket(run.ID) < 30 {
			want = 2
		}
		if run.AgentVersion != want {
			t.Fatalf("run %s pinned version %d, its canary bucket says %d", run.ID, run.AgentVersion, want)
		}
		if want == 2 {
			canary++
		}
	}
	if canary == 0 || canary == 60 {
		t.Fatalf("%d of 60 runs went to the canary", canary)
	}
	var run api.Run
	f.do(priya, "POST", "/v1/runs", map[string]any{"agent": "dispute-bot", "version": 2, "input": "x", "mode": "async"}).decode(t, &run)
	if run.AgentVersion != 2 {
		t.Fatalf("an explicit version: %d", run.AgentVersion)
	}
}
