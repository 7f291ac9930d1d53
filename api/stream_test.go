package api_test

import (
	"bufio"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

var (
	streamSchemaMu sync.Mutex
	streamSchemas  *schemaSet
)

// checkStreamMessage validates one SSE message against the documented
// contract: its data is a StreamMessage (components/schemas), a StreamEvent's
// type is the SSE event name and its id the SSE id; only message.delta and
// stream.end go without an id. Every test that reads a stream through
// readSSE checks every message it reads.
func checkStreamMessage(t testing.TB, e sseEvent) {
	t.Helper()
	streamSchemaMu.Lock()
	if streamSchemas == nil {
		ss, err := newSchemaSet()
		if err != nil {
			streamSchemaMu.Unlock()
			t.Fatal(err)
		}
		streamSchemas = ss
	}
	err := streamSchemas.validate(map[string]any{"$ref": "#/components/schemas/StreamMessage"}, "", []byte(e.data))
	streamSchemaMu.Unlock()
	if err != nil {
		t.Fatalf("stream message %q %s breaks the documented contract: %v", e.event, e.data, err)
	}
	switch e.event {
	case api.StreamMessageDelta, api.StreamEnd:
		if e.id != "" {
			t.Fatalf("%s message with id %q", e.event, e.id)
		}
		return
	}
	var sev api.StreamEvent
	_ = json.Unmarshal([]byte(e.data), &sev)
	if sev.Type != e.event || strconv.FormatInt(sev.ID, 10) != e.id || sev.V != api.StreamVersion {
		t.Fatalf("message event %q id %q carries type %q id %d version %d", e.event, e.id, sev.Type, sev.ID, sev.V)
	}
}

// TestStreamContractNamesEveryLogType: every log event type has a public
// name (log.event is for types a newer log has and this stream version does
// not know), and every public type is documented.
func TestStreamContractNamesEveryLogType(t *testing.T) {
	want := map[string]string{
		trace.EvRunStarted: api.StreamRunStarted, trace.EvStepStarted: api.StreamStepStarted,
		trace.EvModelCall: api.StreamModelCall, trace.EvToolAttempt: api.StreamToolCall,
		trace.EvToolResult: api.StreamToolResult, trace.EvLoopNote: api.StreamLoopNote,
		trace.EvSignal: api.StreamSignal, trace.EvBudget: api.StreamBudgetExceeded,
		trace.EvTaint: api.StreamTainted, trace.EvApprovalReq: api.StreamApprovalRequired,
		trace.EvApprovalDec: api.StreamApprovalDecided, trace.EvDiverged: api.StreamReplayDiverged,
		trace.EvCompaction: api.StreamCompaction, trace.EvSandboxEnd: api.StreamSandboxTeardown,
		trace.EvRunCompleted: api.StreamRunCompleted, trace.EvRunFailed: api.StreamRunFailed,
		"a_type_from_the_future": api.StreamLogEvent,
	}
	var raw struct {
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(api.OpenAPI(), &raw); err != nil {
		t.Fatal(err)
	}
	for logType, pub := range want {
		got := api.PublicEventType(&store.Event{Type: logType, Payload: []byte(`{}`)})
		if got != pub {
			t.Errorf("log type %s maps to %q, want %q", logType, got, pub)
		}
		if _, ok := raw.Components.Schemas["Stream_"+strings.ReplaceAll(pub, ".", "_")]; !ok {
			t.Errorf("public type %s is not documented", pub)
		}
	}
	cancelled := api.PublicEventType(&store.Event{Type: trace.EvRunFailed, Payload: []byte(`{"status":"cancelled"}`)})
	if cancelled != api.StreamRunCancelled {
		t.Errorf("a cancelled run ends with %q", cancelled)
	}
	for _, pub := range []string{api.StreamRunWaiting, api.StreamRunCancelled} {
		if _, ok := raw.Components.Schemas["Stream_"+strings.ReplaceAll(pub, ".", "_")]; !ok {
			t.Errorf("public type %s is not documented", pub)
		}
	}
}

// eventSource behaves as a standard (WHATWG) EventSource: it keeps the last
// id it saw, reconnects with Last-Event-ID whenever the connection ends
// (also after stream.end, which it does not understand), and stops only when
// the server answers 204. Connections are cut at random byte offsets.
func eventSource(t *testing.T, f *fixture, runID string, rng *rand.Rand, onMessage func(sseEvent)) (connections int) {
	t.Helper()
	lastID := ""
	for connections = 1; connections < 3000; connections++ {
		req, _ := http.NewRequest("GET", f.http.URL+"/v1/runs/"+runID+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+f.keys[priya])
		req.Header.Set("Accept", "text/event-stream")
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusNoContent {
			resp.Body.Close()
			return connections
		}
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("connection %d: %d %s", connections, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		var body io.Reader = resp.Body
		if rng.IntN(3) > 0 {
			body = io.LimitReader(resp.Body, int64(200+rng.IntN(6000)))
		}
		// WHATWG parsing: the id field updates the last event id when the
		// message is dispatched; a message cut before its blank line is
		// dropped whole.
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 1<<20), 4<<20)
		var cur sseEvent
		hasID := false
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if hasID {
					lastID = cur.id
				}
				if cur.data != "" {
					checkStreamMessage(t, cur)
					onMessage(cur)
				}
				cur, hasID = sseEvent{}, false
			case strings.HasPrefix(line, "id: "):
				cur.id, hasID = strings.TrimPrefix(line, "id: "), true
			case strings.HasPrefix(line, "event: "):
				cur.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				cur.data = strings.TrimPrefix(line, "data: ")
			}
		}
		resp.Body.Close()
	}
	t.Fatalf("run %s: still reconnecting after %d connections", runID, connections)
	return connections
}

// TestStreamEventSourceClient: a standard EventSource client, cut at random
// points, receives every log event exactly once and in order, is told each
// time the run waits, and stops on the 204 that answers its reconnect after
// the end.
func TestStreamEventSourceClient(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	id := f.startAsync(priya)
	var ids []int64
	decided := map[string]bool{}
	waitingAfter := map[int64]bool{} // ids of run.waiting messages
	approvalAt := map[int64]bool{}   // ids of approval.required messages
	ended := 0
	conns := eventSource(t, f, id, rng, func(e sseEvent) {
		switch e.event {
		case api.StreamMessageDelta:
			return
		case api.StreamEnd:
			ended++
			return
		case api.StreamRunWaiting:
			var w api.StreamRunWaitingData
			sev := decodeStream(t, e, &w)
			if w.Status != store.StatusWaiting {
				t.Fatalf("run.waiting with status %q", w.Status)
			}
			waitingAfter[sev.ID] = true
			return
		}
		sev := decodeStream(t, e, &json.RawMessage{})
		if n := len(ids); n > 0 && sev.ID != ids[n-1]+1 {
			t.Fatalf("event %d (%s) after event %d: not each once, in order", sev.ID, e.event, ids[n-1])
		}
		if len(ids) == 0 && sev.ID != 1 {
			t.Fatalf("first event has id %d", sev.ID)
		}
		ids = append(ids, sev.ID)
		if e.event == api.StreamApprovalRequired {
			approvalAt[sev.ID] = true
			var q api.StreamApprovalRequiredData
			decodeStream(t, e, &q)
			if !decided[q.ApprovalID] {
				decided[q.ApprovalID] = true
				f.decide(meera, q.ApprovalID, map[string]any{"decision": "approve"})
			}
		}
	})
	want, err := f.p.Store.Events(t.Context(), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != len(want) {
		t.Fatalf("received %d events over %d connections, the log has %d", len(ids), conns, len(want))
	}
	if len(decided) != 2 {
		t.Fatalf("%d approvals seen, want 2 (refund, e-mail)", len(decided))
	}
	// The run waited twice; each wait was announced with the id of the
	// event it waits after (a client cut at the wrong moment may see a
	// wait more than once, never with another id).
	for wid := range waitingAfter {
		if !approvalAt[wid] {
			t.Errorf("run.waiting with id %d, which is no approval.required", wid)
		}
	}
	if len(waitingAfter) == 0 {
		t.Error("no run.waiting message")
	}
	t.Logf("%d events, %d connections, %d end messages", len(ids), conns, ended)
}

// TestStreamPastTheEnd: Last-Event-ID at or past a finished run's last
// event is answered 204; past a live run's last event it is a 400 that says
// why, not a stream that waits for an event that will never have that id.
func TestStreamPastTheEnd(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	id := f.startAsync(priya)
	ap := f.waitPending(priya, id, "issue_refund")
	get := func(last string) (int, string) {
		req, _ := http.NewRequest("GET", f.http.URL+"/v1/runs/"+id+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+f.keys[priya])
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Last-Event-ID", last)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp.StatusCode, string(b)
	}
	run, err := f.p.Store.GetRun(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(strconv.FormatInt(run.LastSeq+5, 10)); code != 400 || !strings.Contains(body, "past run") {
		t.Fatalf("past the end of a waiting run: %d %s", code, body)
	}
	f.decide(meera, ap.ID, map[string]any{"decision": "approve"})
	em := f.waitPending(priya, id, "send_email")
	f.decide(meera, em.ID, map[string]any{"decision": "approve"})
	f.waitStatus(priya, id, store.StatusCompleted)
	run, _ = f.p.Store.GetRun(t.Context(), id)
	for _, last := range []int64{run.LastSeq, run.LastSeq + 10} {
		if code, body := get(strconv.FormatInt(last, 10)); code != 204 || body != "" {
			t.Fatalf("Last-Event-ID %d of a finished run (last %d): %d %q", last, run.LastSeq, code, body)
		}
	}
	// One before the end: the last event, then stream.end.
	code, body := get(strconv.FormatInt(run.LastSeq-1, 10))
	if code != 200 || !strings.Contains(body, "event: "+api.StreamRunCompleted) || !strings.Contains(body, "event: "+api.StreamEnd) {
		t.Fatalf("one before the end: %d %s", code, body)
	}
}
