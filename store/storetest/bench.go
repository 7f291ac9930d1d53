package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
)

// BenchSteps measures what the store costs one agent step, the same way
// for every back end: a buffered append (the model call's record) and then
// a durable append with the run's counters (the tool result the step
// waits on), from writers runs at once. It reports steps/s besides the
// time per step; with writers > 1 the time per step is the aggregate's
// inverse, not one step's latency.
func BenchSteps(b *testing.B, s store.Store, writers int) {
	ctx := b.Context()
	epochs := make([]int64, writers)
	prefix := fmt.Sprintf("bench-%d-%d", writers, time.Now().UnixNano())
	for i := range writers {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if err := s.CreateRun(ctx, &store.Run{ID: id, Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x", Mode: modeAsync}); err != nil {
			b.Fatal(err)
		}
		r, err := s.ClaimRunByID(ctx, id, "bench", 1000*time.Hour, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		epochs[i] = r.LeaseEpoch
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	b.ResetTimer()
	for i := range writers {
		wg.Go(func() {
			c := &chain{runID: fmt.Sprintf("%s-%d", prefix, i)}
			for step := 1; next.Add(1) <= int64(b.N); step++ {
				model := c.next(1, "model_call")
				if err := s.Append(ctx, store.AppendRequest{RunID: c.runID, Epoch: epochs[i], Events: model}); err != nil {
					b.Error(err)
					return
				}
				c.accept(model)
				result := c.next(1, "tool_result")
				if err := s.Append(ctx, store.AppendRequest{RunID: c.runID, Epoch: epochs[i], Events: result, Durable: true,
					Update: &store.RunUpdate{Steps: ptr(step)}}); err != nil {
					b.Error(err)
					return
				}
				c.accept(result)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "steps/s")
}
