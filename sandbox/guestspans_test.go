package sandbox_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/sandbox"
)

// Spans a program writes are hostile input: the host keeps only the
// documented shape, clamps times into its own window of the command,
// refuses the platform's attribute namespaces and ids chosen by the guest,
// and caps how many a call and a session may emit.
func TestHostile_GuestSpans(t *testing.T) {
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	end := start.Add(2 * time.Second)
	ns := func(d time.Duration) int64 { return start.Add(d).UnixNano() }
	lines := []string{
		// accepted: a span, and a child of it whose times run outside the window
		fmt.Sprintf(`{"name":"query db","start_unix_nano":%d,"end_unix_nano":%d,"attributes":{"db.rows":12,"db.statement":"select 1\u0007","ok":true,"ratio":0.5}}`, ns(100*time.Millisecond), ns(300*time.Millisecond)),
		fmt.Sprintf(`{"name":"parse","parent":0,"status":"error","start_unix_nano":%d,"end_unix_nano":%d}`, ns(-time.Hour), ns(time.Hour)),
		// refused, each for its own reason
		fmt.Sprintf(`{"name":"forged","trace_id":"ffffffffffffffffffffffffffffffff","start_unix_nano":%d,"end_unix_nano":%d}`, ns(0), ns(1)),
		fmt.Sprintf(`{"name":"spoof","start_unix_nano":%d,"end_unix_nano":%d,"attributes":{"agentplane.decision.allowed":true}}`, ns(0), ns(1)),
		fmt.Sprintf(`{"name":"spoof2","start_unix_nano":%d,"end_unix_nano":%d,"attributes":{"gen_ai.tool.name":"x"}}`, ns(0), ns(1)),
		fmt.Sprintf(`{"name":"self parent","parent":3,"start_unix_nano":%d,"end_unix_nano":%d}`, ns(0), ns(1)),
		fmt.Sprintf(`{"name":"bad\nname","start_unix_nano":%d,"end_unix_nano":%d}`, ns(0), ns(1)),
		fmt.Sprintf(`{"name":"backwards","start_unix_nano":%d,"end_unix_nano":%d}`, ns(time.Second), ns(0)),
		fmt.Sprintf(`{"name":"nested","start_unix_nano":%d,"end_unix_nano":%d,"attributes":{"a":{"b":1}}}`, ns(0), ns(1)),
		`not json at all`,
		fmt.Sprintf(`{"name":"%s","start_unix_nano":%d,"end_unix_nano":%d}`, strings.Repeat("n", 65), ns(0), ns(1)),
	}
	gs := sandbox.ParseGuestSpans([]byte(strings.Join(lines, "\n")+"\n\n"), start, end, sandbox.MaxGuestSpansPerSession)
	if gs == nil || len(gs.Spans) != 2 || gs.Dropped != 9 {
		t.Fatalf("kept %+v", gs)
	}
	q, p := gs.Spans[0], gs.Spans[1]
	if q.Name != "query db" || q.Parent != -1 || q.StartUS != 100_000 || q.DurationUS != 200_000 || q.Error {
		t.Errorf("first span %+v", q)
	}
	if q.Attributes["db.rows"] != int64(12) || q.Attributes["ok"] != true || q.Attributes["ratio"] != 0.5 {
		t.Errorf("attributes %#v", q.Attributes)
	}
	if s, _ := q.Attributes["db.statement"].(string); strings.ContainsRune(s, 7) {
		t.Errorf("a control character passed: %q", s)
	}
	if p.Parent != 0 || !p.Error || p.StartUS != 0 || p.DurationUS != 2_000_000 {
		t.Errorf("second span (times clamped into the host's window) %+v", p)
	}
	if len(gs.Reasons) < 6 {
		t.Errorf("reasons %q", gs.Reasons)
	}

	// Limits: a call keeps MaxGuestSpansPerCall, a session what it has left.
	var many []string
	for i := range 100 {
		many = append(many, fmt.Sprintf(`{"name":"s%d","start_unix_nano":%d,"end_unix_nano":%d}`, i, ns(0), ns(1)))
	}
	data := []byte(strings.Join(many, "\n"))
	if gs := sandbox.ParseGuestSpans(data, start, end, sandbox.MaxGuestSpansPerSession); len(gs.Spans) != sandbox.MaxGuestSpansPerCall || gs.Dropped != 100-sandbox.MaxGuestSpansPerCall {
		t.Errorf("per call: kept %d, dropped %d", len(gs.Spans), gs.Dropped)
	}
	if gs := sandbox.ParseGuestSpans(data, start, end, 5); len(gs.Spans) != 5 || gs.Dropped != 95 {
		t.Errorf("per session: kept %d, dropped %d", len(gs.Spans), gs.Dropped)
	}
	if gs := sandbox.ParseGuestSpans(data, start, end, 0); len(gs.Spans) != 0 || gs.Dropped != 100 {
		t.Errorf("spent session: kept %d, dropped %d", len(gs.Spans), gs.Dropped)
	}
	if gs := sandbox.ParseGuestSpans([]byte("\n \n"), start, end, 10); gs != nil {
		t.Errorf("an empty file gave %+v", gs)
	}
}
