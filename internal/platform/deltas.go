package platform

import (
	"sync"

	"github.com/agentplane/agentplane/model"
)

// Delta is streamed model text of one step of a run.
type Delta struct {
	RunID string `json:"run_id"`
	Step  int    `json:"step"`
	Text  string `json:"text,omitempty"`
	Reset bool   `json:"reset,omitempty"`
}

// DeltaBus fans streamed model text out to watchers of a run (SSE clients).
// It is a live view, not a record: nothing is stored, a slow watcher loses
// deltas rather than slowing the run, and the model_call event remains the
// truth. Safe for concurrent use.
type DeltaBus struct {
	mu   sync.Mutex
	subs map[string]map[chan Delta]struct{}
}

// NewDeltaBus returns an empty bus.
func NewDeltaBus() *DeltaBus { return &DeltaBus{subs: map[string]map[chan Delta]struct{}{}} }

// Subscribe returns a channel of runID's deltas and a function to stop.
func (b *DeltaBus) Subscribe(runID string) (<-chan Delta, func()) {
	ch := make(chan Delta, 256)
	b.mu.Lock()
	if b.subs[runID] == nil {
		b.subs[runID] = map[chan Delta]struct{}{}
	}
	b.subs[runID][ch] = struct{}{}
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.subs[runID], ch)
		if len(b.subs[runID]) == 0 {
			delete(b.subs, runID)
		}
		b.mu.Unlock()
	}
}

// publish sends without blocking; a full watcher drops the delta.
func (b *DeltaBus) publish(runID string, step int, d model.Delta) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs[runID] {
		select {
		case ch <- Delta{RunID: runID, Step: step, Text: d.Text, Reset: d.Reset}:
		default:
		}
	}
}
