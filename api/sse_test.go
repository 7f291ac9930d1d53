package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
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

// resumingClient follows a run's stream, dropping the connection at random
// byte offsets (often in the middle of a message) and resuming with
// Last-Event-ID, approving every approval it sees as meera. It returns the
// events received, in order, and how many connections it used.
func resumingClient(t *testing.T, f *fixture, runID string, rng *rand.Rand) ([]api.Event, int) {
	t.Helper()
	var got []api.Event
	decided := map[string]bool{}
	last := int64(0)
	stuck := 0 // connections in a row that completed no message
	for conns := 1; ; conns++ {
		if conns > 2000 {
			t.Fatalf("run %s: no end after 2000 connections", runID)
		}
		req, _ := http.NewRequest("GET", f.http.URL+"/v1/runs/"+runID+"/events?include=log", nil)
		req.Header.Set("Authorization", "Bearer "+f.keys[priya])
		req.Header.Set("Accept", "text/event-stream")
		if last > 0 || rng.IntN(2) == 0 {
			req.Header.Set("Last-Event-ID", strconv.FormatInt(last, 10))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusNoContent && last > 0 {
			// The connection broke after the terminal event, before the
			// end message: the reconnect says the stream is over.
			resp.Body.Close()
			return got, conns
		}
		if resp.StatusCode != 200 {
			t.Fatalf("stream: %d", resp.StatusCode)
		}
		// Cut anywhere in the next few KB; a message longer than that is
		// reached by doubling the allowance after each fruitless connection.
		cut := (1 + rng.IntN(3000)) << min(stuck, 12)
		before := len(got)
		ended := false
		// Messages are handled as they arrive: an approval is decided while
		// the connection is still open.
		readSSE(t, io.LimitReader(resp.Body, int64(cut)), func(e sseEvent) bool {
			if e.event == api.StreamEnd {
				ended = true
				return true
			}
			var sev api.StreamEvent
			if err := json.Unmarshal([]byte(e.data), &sev); err != nil || sev.Log == nil {
				t.Fatalf("message %s: %v", e.data, err)
			}
			ev := *sev.Log
			if seqOf(t, e) != ev.Seq || sev.ID != ev.Seq || sev.Type != e.event {
				t.Fatalf("SSE id %s carries event seq %d", e.id, ev.Seq)
			}
			got = append(got, ev)
			last = ev.Seq
			if ev.Type == trace.EvApprovalReq {
				var q trace.ApprovalRequested
				_ = json.Unmarshal(ev.Payload, &q)
				if !decided[q.ApprovalID] {
					decided[q.ApprovalID] = true
					f.decide(meera, q.ApprovalID, map[string]any{"decision": "approve"})
				}
			}
			return false
		})
		resp.Body.Close()
		if ended {
			return got, conns
		}
		if len(got) == before {
			stuck++
		} else {
			stuck = 0
		}
	}
}

// TestSSEResume: clients that disconnect at random points (mid-message
// included) and resume with Last-Event-ID receive every event of the log
// exactly once, in order, byte for byte.
func TestSSEResume(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const runs = 4
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			id := f.startAsync(priya)
			got, conns := resumingClient(t, f, id, rng)
			want, err := f.p.Store.Events(context.Background(), id, 0, 0)
			if err != nil {
				t.Error(err)
				return
			}
			if len(got) != len(want) {
				t.Errorf("run %s: received %d events over %d connections, the log has %d", id, len(got), conns, len(want))
				return
			}
			for j := range want {
				if got[j].Seq != want[j].Seq || got[j].Type != want[j].Type || string(got[j].Payload) != string(want[j].Payload) ||
					got[j].Hash != fmt.Sprintf("%x", want[j].Hash) {
					t.Errorf("run %s: event %d differs: got seq %d %s", id, j, got[j].Seq, got[j].Type)
					return
				}
			}
			if got[len(got)-1].Type != trace.EvRunCompleted {
				t.Errorf("run %s ended with %s", id, got[len(got)-1].Type)
			}
			t.Logf("run %s: %d events over %d connections", id, len(got), conns)
		}()
	}
	wg.Wait()
}

// TestSSEStalledClients: clients that open a stream and never read do not
// hold up the run or a reading client, and an idle stream gets heartbeats.
func TestSSEStalledClients(t *testing.T) {
	f := newFixture(t, fixtureOptions{apiOptions: func(o *api.Options) { o.WriteTimeout = 300 * time.Millisecond }})
	id := f.startAsync(priya)
	f.waitPending(priya, id, "issue_refund")

	// Twenty stalled clients: the request is sent, nothing is read.
	addr := strings.TrimPrefix(f.http.URL, "http://")
	for range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /v1/runs/%s/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n", id, f.keys[priya])
	}
	// A reading client sees heartbeats while the run waits.
	req, _ := http.NewRequest("GET", f.http.URL+"/v1/runs/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+f.keys[priya])
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	start := time.Now()
	for heartbeat := false; !heartbeat; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		heartbeat = strings.HasPrefix(line, ": heartbeat")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("first heartbeat after %v", d)
	}
	ap := f.waitPending(priya, id, "issue_refund")
	f.decide(meera, ap.ID, map[string]any{"decision": "approve"})
	em := f.waitPending(priya, id, "send_email")
	f.decide(meera, em.ID, map[string]any{"decision": "approve"})
	f.waitStatus(priya, id, store.StatusCompleted)
	rest := readSSE(t, br, nil)
	if len(rest) == 0 || rest[len(rest)-1].event != api.StreamEnd {
		t.Fatalf("the reading client did not get to the end: %d messages", len(rest))
	}
}
