package loop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/postgres/pgtest"
	"github.com/agentplane/agentplane/trace"
)

// benchModel answers instantly: a tool call with distinct arguments for
// `steps` turns, then a final text. resultSize pads the echo so tool
// results have a realistic size.
type benchModel struct {
	steps   int
	tool    string
	argSize int
}

func (m benchModel) Complete(_ context.Context, _ string, req *model.Request, _ model.Attribution) (*model.CallResult, error) {
	turn := 0
	for _, msg := range req.Messages {
		if msg.Role == model.RoleAssistant {
			turn++
		}
	}
	usage := model.Usage{InputTokens: model.EstimateTokens(req), OutputTokens: 300}
	resp := &model.Response{StopReason: model.StopEndTurn, Usage: usage,
		Content: []model.Part{{Type: model.PartText, Text: fmt.Sprintf("step %d: %s", turn, strings.Repeat("reasoning ", 120))}}}
	if turn < m.steps && len(req.Tools) > 0 && !req.ForbidToolCalls {
		args, _ := json.Marshal(map[string]string{"text": fmt.Sprintf("%d %s", turn, strings.Repeat("d", m.argSize))})
		resp.StopReason = model.StopToolUse
		resp.Content = append(resp.Content, model.Part{Type: model.PartToolUse, ToolUseID: fmt.Sprintf("toolu_%d", turn), Name: m.tool, Input: args})
	}
	return &model.CallResult{Response: resp, Usage: usage, Cost: model.Money{Micros: 1, Currency: "USD"}, CostKnown: true, ModelID: "bench"}, nil
}

// benchStores are the run stores the step benchmarks run on: the
// embedded SQLite store, and PostgreSQL (a fresh database of the test
// cluster, AGENTPLANE_TEST_POSTGRES; skipped without it) beside it in the
// same run.
var benchStores = []struct {
	name string
	dsn  func(b *testing.B) string
}{
	{"sqlite", func(*testing.B) string { return "" }},
	{"postgres", func(b *testing.B) string { return pgtest.DSN(b) }},
}

const benchBudgets = "{max_steps: 1000, max_input_tokens: 100000000000, max_cost_usd: 1000000, max_wall_clock: 10h}"

// BenchmarkStepOverhead measures the platform's own time per step of one
// run: a zero-latency model, a no-op tier-1 tool, durable storage. It reports
// the p50 and p99 of the gaps between consecutive step_started events.
func BenchmarkStepOverhead(b *testing.B) {
	for _, st := range benchStores {
		b.Run("store="+st.name, func(b *testing.B) { benchStepOverhead(b, st.dsn) })
	}
}

func benchStepOverhead(b *testing.B, dsn func(*testing.B) string) {
	for _, tc := range []struct{ name, tool string }{{"side_effects=none", "echo"}, {"side_effects=external", "mutate_echo"}} {
		b.Run(tc.name, func(b *testing.B) {
			const steps = 200
			f := newFixture(&testing.T{}, fixtureOptions{budgets: benchBudgets, models: benchModel{steps: steps, tool: tc.tool}, dir: b.TempDir(), store: dsn(b)})
			defer f.p.Close()
			var gaps []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				run, evs := f.runB(b, "bench")
				if run.Status != store.StatusCompleted {
					b.Fatalf("status %s", run.Status)
				}
				var prev time.Time
				for _, ev := range evs {
					if ev.Type == trace.EvStepStarted {
						if !prev.IsZero() {
							gaps = append(gaps, ev.At.Sub(prev))
						}
						prev = ev.At
					}
				}
			}
			b.StopTimer()
			sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
			b.ReportMetric(float64(gaps[len(gaps)/2].Microseconds()), "p50-µs/step")
			b.ReportMetric(float64(gaps[len(gaps)*99/100].Microseconds()), "p99-µs/step")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkAggregateSteps measures steps per second across 1, 16 and 64
// concurrent runs sharing one store (group commit).
func BenchmarkAggregateSteps(b *testing.B) {
	for _, st := range benchStores {
		b.Run("store="+st.name, func(b *testing.B) { benchAggregateSteps(b, st.dsn) })
	}
}

func benchAggregateSteps(b *testing.B, dsn func(*testing.B) string) {
	for _, tool := range []string{"echo", "mutate_echo"} {
		for _, conc := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("tool=%s/runs=%d", tool, conc), func(b *testing.B) {
				const steps = 25
				f := newFixture(&testing.T{}, fixtureOptions{budgets: benchBudgets, models: benchModel{steps: steps, tool: tool}, dir: b.TempDir(), store: dsn(b)})
				defer f.p.Close()
				ctx := context.Background()
				total := 0
				var elapsed, cpu time.Duration
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					ids := make([]string, conc)
					for j := range ids {
						r, err := f.p.Runs.Start(ctx, startReq())
						if err != nil {
							b.Fatal(err)
						}
						ids[j] = r.ID
					}
					start, cpu0 := time.Now(), processCPU(b)
					var wg sync.WaitGroup
					for _, id := range ids {
						wg.Add(1)
						go func() {
							defer wg.Done()
							if _, err := f.p.Embedded.Execute(ctx, id); err != nil {
								b.Error(err)
							}
						}()
					}
					wg.Wait()
					elapsed += time.Since(start)
					cpu += processCPU(b) - cpu0
					total += conc * (steps + 1)
				}
				b.StopTimer()
				b.ReportMetric(float64(total)/elapsed.Seconds(), "steps/s")
				b.ReportMetric(float64(cpu.Microseconds())/float64(total), "cpu-µs/step")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// processCPU is the user and system CPU time the process has used: per
// step it says what a step costs whatever else the machine runs (the
// wall-clock throughput depends on the load; this depends on it less).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTraceSize reports, for a 25-step run with realistic payloads
// (about 1.2 KB of model output and 5 KB of tool result per step), the bytes
// the trace occupies against the unique content it holds and against naive
// logging of the full prompt at every step.
func BenchmarkTraceSize(b *testing.B) {
	f := newFixture(&testing.T{}, fixtureOptions{budgets: benchBudgets, models: benchModel{steps: 25, tool: "echo", argSize: 5000}, dir: b.TempDir()})
	defer f.p.Close()
	ctx := context.Background()
	var traceBytes, unique, naive int64
	for i := 0; i < b.N; i++ {
		run, evs := f.runB(b, "bench")
		traceBytes, unique, naive = 0, 0, 0
		blobs := map[string]bool{}
		for _, ev := range evs {
			// Stored row: payload + fixed columns (seq, step, at: 8 bytes
			// each; two 32-byte hashes; the type and run id).
			traceBytes += int64(len(ev.Payload)) + 24 + 64 + int64(len(ev.Type)+len(ev.RunID))
			refs, err := trace.BlobRefs(&ev)
			if err != nil {
				b.Fatal(err)
			}
			for _, c := range refs {
				if !blobs[c.Blob] {
					blobs[c.Blob] = true
					traceBytes += c.Size
				}
			}
			switch ev.Type {
			case trace.EvRunStarted:
				var p trace.RunStarted
				json.Unmarshal(ev.Payload, &p)
				unique += p.System.Size + p.ToolDefs.Size + int64(len(p.Task))
			case trace.EvModelCall:
				var p trace.ModelCall
				json.Unmarshal(ev.Payload, &p)
				naive += p.PromptBytes
				for _, part := range p.Response.Content {
					unique += int64(len(part.Text) + len(part.Input))
					naive += int64(len(part.Text) + len(part.Input))
				}
			case trace.EvToolResult:
				var p trace.ToolResult
				json.Unmarshal(ev.Payload, &p)
				unique += p.Bytes
				naive += p.Bytes
			}
		}
		_ = run
	}
	_ = ctx
	b.ReportMetric(float64(traceBytes), "trace-bytes")
	b.ReportMetric(float64(unique), "unique-bytes")
	b.ReportMetric(float64(naive), "naive-bytes")
	b.ReportMetric(float64(traceBytes)/float64(unique), "trace/unique")
	b.ReportMetric(float64(naive)/float64(traceBytes), "naive/trace")
	b.ReportMetric(0, "ns/op")
}

var _ = engine.Durable
