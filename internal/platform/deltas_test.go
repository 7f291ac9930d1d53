package platform_test

import (
	"context"
	"encoding/json"
	"github.com/agentplane/agentplane/runs"
	"testing"

	"github.com/agentplane/agentplane/trace"
)

// Streamed text reaches a watcher step by step and matches what the log
// recorded; a recorded replay streams nothing (no model was asked).
func TestDeltasFollowTheRecordedResponses(t *testing.T) {
	p := openDemo(t)
	ctx := context.Background()
	r, err := p.Runs.Start(ctx, runs.StartRequest{Agent: "card-dispute-assistant@1", Task: "Ticket T-40127: duplicate airline charge.", Tenant: "example-bank", User: "priya"})
	if err != nil {
		t.Fatal(err)
	}
	ch, stop := p.Deltas.Subscribe(r.ID)
	defer stop()
	runToEnd(t, p, r.ID)
	got := map[int]string{}
	for done := false; !done; {
		select {
		case d := <-ch:
			if d.Reset {
				got[d.Step] = ""
			}
			got[d.Step] += d.Text
		default:
			done = true
		}
	}
	evs, _ := p.Store.Events(ctx, r.ID, 0, 0)
	n := 0
	for _, ev := range evs {
		if ev.Type != trace.EvModelCall {
			continue
		}
		var mc trace.ModelCall
		json.Unmarshal(ev.Payload, &mc)
		if mc.Response == nil || mc.Response.Text() == "" {
			continue
		}
		n++
		if got[ev.Step] != mc.Response.Text() {
			t.Fatalf("step %d streamed %q, log has %q", ev.Step, got[ev.Step], mc.Response.Text())
		}
	}
	if n == 0 {
		t.Fatal("no text to compare")
	}
	rp, err := p.Runs.Replay(ctx, runs.ReplayRequest{Of: r.ID, FromStep: 1})
	if err != nil {
		t.Fatal(err)
	}
	ch2, stop2 := p.Deltas.Subscribe(rp.ID)
	defer stop2()
	runToEnd(t, p, rp.ID)
	select {
	case d := <-ch2:
		t.Fatalf("a recorded replay streamed %+v", d)
	default:
	}
}
