package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/api"
)

// A streaming run's SSE carries the model's text as message.delta frames
// (no id, so Last-Event-ID never moves) ahead of the model_call event that
// records it.
func TestSSEMessageDeltas(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	body := strings.NewReader(`{"agent":"` + demoAgent + `","input":"` + demoTask + `","mode":"stream"}`)
	req, _ := http.NewRequest("POST", f.http.URL+"/v1/runs", body)
	req.Header.Set("Authorization", "Bearer "+f.keys[priya])
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "delta-test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	var deltas, models, matched, shownStep int
	var streamed strings.Builder
	readSSEAll(t, resp.Body, func(e sseEvent) bool {
		switch e.event {
		case "message.delta":
			if e.id != "" {
				t.Fatalf("a delta carries id %s", e.id)
			}
			var d api.StreamMessageDeltaData
			if err := json.Unmarshal([]byte(e.data), &d); err != nil {
				t.Fatal(err)
			}
			if d.Step > shownStep {
				t.Fatalf("a delta of step %d arrived before that step's step.started (last shown: step %d)", d.Step, shownStep)
			}
			deltas++
			streamed.WriteString(d.Text)
		case api.StreamStepStarted:
			shownStep = max(shownStep, decodeStream(t, e, &api.StreamStepStartedData{}).Step)
		case api.StreamModelCall:
			models++
			var mc api.StreamModelCallData
			decodeStream(t, e, &mc)
			// A watcher that subscribed late misses early text; any text
			// it did get arrived before the event that records it.
			if mc.Text != "" && strings.Contains(streamed.String(), mc.Text) {
				matched++
			}
		case api.StreamApprovalRequired:
			var q api.StreamApprovalRequiredData
			decodeStream(t, e, &q)
			f.decide(meera, q.ApprovalID, map[string]any{"decision": "approve"})
		}
		return e.event == api.StreamEnd
	})
	if deltas == 0 || models == 0 || matched == 0 {
		t.Fatalf("deltas %d, model calls %d, texts streamed before their event %d", deltas, models, matched)
	}
}
