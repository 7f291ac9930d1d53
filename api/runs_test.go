package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// TestAsyncRunThroughApproval drives the demo over HTTP: an async run waits
// for a supervisor's approval of the refund; the requester, another tenant
// and a user outside the group cannot decide it; the supervisor approves;
// the run completes and the bank refunded exactly once.
func TestAsyncRunThroughApproval(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	id := f.startAsync(priya)
	run := f.waitStatus(priya, id, store.StatusWaiting)
	if len(run.PendingApprovals) != 1 {
		t.Fatalf("pending approvals = %+v", run.PendingApprovals)
	}
	ap := run.PendingApprovals[0]
	if ap.Group != "card-ops-supervisors" || ap.Requester != priya || ap.Tool != "issue_refund" || ap.Status != "pending" ||
		!strings.Contains(ap.Description, "12499") {
		t.Fatalf("approval = %+v", ap)
	}
	decide := func(user string, body any) *response {
		return f.do(user, "POST", "/v1/approvals/"+ap.ID+":decide", body)
	}
	if r := decide(priya, map[string]any{"decision": "approve"}); r.status != http.StatusForbidden || !strings.Contains(string(r.body), "not_approver") {
		t.Fatalf("the requester approved her own request: %s", r)
	}
	if r := decide(gus, map[string]any{"decision": "approve"}); r.status != http.StatusNotFound {
		t.Fatalf("another tenant's supervisor: %s, want 404", r)
	}
	if r := decide(meera, map[string]any{"decision": "maybe"}); r.status != http.StatusBadRequest {
		t.Fatalf("bad decision: %s", r)
	}
	if r := f.do(meera, "GET", "/v1/approvals/"+ap.ID, nil); r.status != http.StatusOK {
		t.Fatalf("GET approval: %s", r)
	}
	var list api.ApprovalList
	lr := f.do(meera, "GET", "/v1/approvals", nil)
	lr.decode(t, &list)
	if len(list.Approvals) != 1 || list.Approvals[0].ID != ap.ID {
		t.Fatalf("GET /v1/approvals = %s", lr)
	}
	if r := decide(meera, map[string]any{"decision": "approve", "comment": "checked the statement; api_key=sk-live-51HxQ2eZvKYlo2C0a9"}); r.status != http.StatusAccepted {
		t.Fatalf("supervisor's approval: %s", r)
	}
	if r := decide(meera, map[string]any{"decision": "reject"}); r.status != http.StatusConflict {
		t.Fatalf("a second decision while the first is on its way: %s, want 409", r)
	}
	// The ticket tainted the run, so the email to an outside address waits
	// for the card-ops agents' approval too (the agent's policy).
	email := f.waitPending(priya, id, "send_email")
	if email.Group != "card-ops-agents" {
		t.Fatalf("second approval = %+v", email)
	}
	f.decide(meera, email.ID, map[string]any{"decision": "approve"})
	run = f.waitStatus(priya, id, store.StatusCompleted)
	if run.Usage.Steps < 6 || run.Output == "" || !run.Usage.CostKnown || run.Usage.Currency != "INR" {
		t.Fatalf("completed run = %+v", run)
	}
	ct, err := bankOf(f.p).CountersForRun(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if ct.RefundsIssued != 1 || ct.RefundedPaise != 1249900 || ct.EmailsSent != 1 {
		t.Fatalf("bank: %+v", ct)
	}
	var evs api.EventList
	f.do(priya, "GET", "/v1/runs/"+id+"/events", nil).decode(t, &evs)
	var types []string
	for i, ev := range evs.Events {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
		types = append(types, ev.Type)
	}
	if raw := f.do(priya, "GET", "/v1/runs/"+id+"/events", nil); strings.Contains(string(raw.body), "sk-live-51HxQ2eZvKYlo2C0a9") ||
		!strings.Contains(string(raw.body), "checked the statement") {
		t.Fatal("the secret in the approver's comment reached the run's log, or the comment is missing")
	}
	joined := strings.Join(types, " ")
	for _, want := range []string{trace.EvApprovalReq, trace.EvApprovalDec, trace.EvRunCompleted} {
		if !strings.Contains(joined, want) {
			t.Errorf("events lack %s: %s", want, joined)
		}
	}
	if r := decide(meera, map[string]any{"decision": "approve"}); r.status != http.StatusConflict {
		t.Fatalf("deciding a decided approval: %s", r)
	}
	var after api.EventList
	f.do(priya, "GET", "/v1/runs/"+id+"/events?after=3&limit=2", nil).decode(t, &after)
	if len(after.Events) != 2 || after.Events[0].Seq != 4 || after.Events[1].Seq != 5 {
		t.Fatalf("events?after=3&limit=2 = %+v", after.Events)
	}
}

// TestIdempotencyKey: a retried request returns the same run; the same key
// with a different body is refused with 422; keys are per tenant.
func TestIdempotencyKey(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	body := `{"agent":"card-dispute-assistant","input":"` + demoTask + `","mode":"async"}`
	first := f.do(priya, "POST", "/v1/runs", body, "Idempotency-Key", "6f1c2a9e-3b7d")
	if first.status != http.StatusAccepted || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %s", first)
	}
	var r1 api.Run
	first.decode(t, &r1)
	// The same request, keys reordered and spaced: the same run.
	again := f.do(priya, "POST", "/v1/runs", `{ "mode": "async", "input":"`+demoTask+`", "agent":"card-dispute-assistant" }`,
		"Idempotency-Key", "6f1c2a9e-3b7d")
	var r2 api.Run
	again.decode(t, &r2)
	if again.status != http.StatusAccepted || r2.ID != r1.ID || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %s (first run %s)", again, r1.ID)
	}
	diff := f.do(priya, "POST", "/v1/runs", `{"agent":"card-dispute-assistant","input":"something else","mode":"async"}`,
		"Idempotency-Key", "6f1c2a9e-3b7d")
	if diff.status != http.StatusUnprocessableEntity || !strings.Contains(string(diff.body), "idempotency_key_reused") {
		t.Fatalf("same key, different body: %s", diff)
	}
	other := f.do(gus, "POST", "/v1/runs", body, "Idempotency-Key", "6f1c2a9e-3b7d")
	var r3 api.Run
	other.decode(t, &r3)
	if other.status != http.StatusAccepted || r3.ID == r1.ID {
		t.Fatalf("another tenant's request with the same key: %s", other)
	}
	rs, err := f.p.Store.ListRuns(context.Background(), store.RunFilter{Tenant: bankTenant})
	if err != nil || len(rs) != 1 {
		t.Fatalf("bank tenant has %d runs (%v), want 1", len(rs), err)
	}
	// Concurrent retries still make one run.
	done := make(chan string, 8)
	for range 8 {
		go func() {
			r := f.do(priya, "POST", "/v1/runs", body, "Idempotency-Key", "concurrent")
			var run api.Run
			_ = json.Unmarshal(r.body, &run)
			done <- run.ID
		}()
	}
	ids := map[string]bool{}
	for range 8 {
		ids[<-done] = true
	}
	if len(ids) != 1 {
		t.Fatalf("8 concurrent requests with one key made runs %v", ids)
	}
}

// TestStreamRun: mode stream answers with the run's events as SSE, ids are
// the log's sequence numbers, and the stream ends after the terminal event.
// Run bindings over HTTP: recorded and returned; malformed ones are 422.
func TestRunBindingsOverHTTP(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	res := f.do(priya, "POST", "/v1/runs", `{"agent":"card-dispute-assistant","input":"`+demoTask+`","mode":"async","bindings":{"customer_id":"c_88213"}}`)
	var r api.Run
	res.decode(t, &r)
	if res.status != http.StatusAccepted || r.Bindings["customer_id"] != "c_88213" {
		t.Fatalf("create: %s", res)
	}
	got := f.do(priya, "GET", "/v1/runs/"+r.ID, "")
	var r2 api.Run
	got.decode(t, &r2)
	if r2.Bindings["customer_id"] != "c_88213" {
		t.Fatalf("get: %s", got)
	}
	bad := f.do(priya, "POST", "/v1/runs", `{"agent":"card-dispute-assistant","input":"x","mode":"async","bindings":{"customer id":"c_1"}}`)
	if bad.status != http.StatusUnprocessableEntity || !strings.Contains(string(bad.body), "run bindings refused") {
		t.Fatalf("malformed binding: %s", bad)
	}
	// Two "bindings" objects: the idempotency hash and the decoder would
	// read different requests, so the body is refused.
	dup := f.do(priya, "POST", "/v1/runs", `{"agent":"card-dispute-assistant","input":"x","mode":"async","bindings":{"customer_id":"c_88213"},"bindings":{"region":"in"}}`,
		"Idempotency-Key", "dup-1")
	if dup.status != http.StatusBadRequest || !strings.Contains(string(dup.body), "appears twice") {
		t.Fatalf("duplicate key: %s", dup)
	}
}

func TestStreamRun(t *testing.T) {
	streamDemo(t, newFixture(t, fixtureOptions{}), 0)
}

// streamDemo starts the demo in stream mode, approves both requests as
// the stream shows them, and checks that the stream holds every event of
// the log in order, then the end, within limit (none when zero).
func streamDemo(t *testing.T, f *fixture, limit time.Duration) (runID string) {
	t.Helper()
	req, _ := http.NewRequest("POST", f.http.URL+"/v1/runs",
		strings.NewReader(`{"agent":"card-dispute-assistant","input":"`+demoTask+`","mode":"stream"}`))
	req.Header.Set("Authorization", "Bearer "+f.keys[priya])
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: limit}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	runID = resp.Header.Get("X-Run-Id")
	var approvals int
	evs := readSSE(t, resp.Body, func(e sseEvent) bool {
		if e.event == api.StreamApprovalRequired {
			var q api.StreamApprovalRequiredData
			decodeStream(t, e, &q)
			approvals++
			if r := f.do(meera, "POST", "/v1/approvals/"+q.ApprovalID+":decide", map[string]any{"decision": "approve"}); r.status != 202 {
				t.Errorf("approve: %s", r)
			}
		}
		return false
	})
	if approvals != 2 {
		t.Fatalf("the stream showed %d approval requests, want 2 (refund, email); %d messages before it stopped", approvals, len(evs))
	}
	if len(evs) < 2 {
		t.Fatalf("the stream ended after %d messages", len(evs))
	}
	last := evs[len(evs)-1]
	if last.event != api.StreamEnd || last.id != "" || !strings.Contains(last.data, `"status":"completed"`) {
		t.Fatalf("last message = %+v", last)
	}
	for i, e := range evs[:len(evs)-1] {
		if seqOf(t, e) != int64(i+1) {
			t.Fatalf("message %d has id %s", i, e.id)
		}
	}
	if evs[len(evs)-2].event != api.StreamRunCompleted {
		t.Fatalf("the last event is %s", evs[len(evs)-2].event)
	}
	if got := f.waitStatus(priya, runID, store.StatusCompleted); got.LastEventID != int64(len(evs)-1) {
		t.Fatalf("run after the stream: %+v", got)
	}
	return runID
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
