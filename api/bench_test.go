package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/api/apitest"
	"github.com/agentplane/agentplane/apiclient"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/model/scripted"
	"github.com/agentplane/agentplane/store"
)

// longScript is a run of steps tool-calling steps: about four events each.
func longScript(steps int) string {
	var b strings.Builder
	b.WriteString("turns:\n")
	for i := 1; i <= steps; i++ {
		fmt.Fprintf(&b, "  - text: \"Looking at the last %d transactions.\"\n    tool_calls:\n      - name: get_card_transactions\n        args: {customer_id: c_88213, limit: %d}\n", i, i)
	}
	b.WriteString("  - text: \"Done.\"\n")
	return b.String()
}

func benchServer(b *testing.B, script string, paused bool) *apitest.Server {
	b.Helper()
	var s *scripted.Script
	if script != "" {
		var err error
		if s, err = scripted.Parse("bench.yaml", []byte(script)); err != nil {
			b.Fatal(err)
		}
	}
	return apitest.Start(b, apitest.Options{
		Platform: func(o *platform.Options) { o.Script = s },
		API: func(o *api.Options) {
			o.Workers, o.InteractiveWorkers, o.Heartbeat, o.NoWorkers = 8, 2, 5*time.Second, paused
		},
	})
}

// BenchmarkRunStart measures, over loopback, the latency of starting runs:
// async (request to 202) and interactive (request to the first streamed
// event, which needs the run created, claimed and its first event
// committed). 200 runs per sample, one at a time, while the earlier runs
// execute on the workers. Run with -benchtime 1x.
func BenchmarkRunStart(b *testing.B) {
	const n = 200
	for _, mode := range []string{"async", "stream"} {
		b.Run("mode="+mode, func(b *testing.B) {
			for range b.N {
				s := benchServer(b, "", false)
				client := &http.Client{}
				var ds []time.Duration
				for i := range n {
					body := fmt.Sprintf(`{"agent":"%s","input":"bench %d","mode":"%s"}`, apitest.DemoAgent, i, mode)
					req, _ := http.NewRequest("POST", s.HTTP.URL+"/v1/runs", strings.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+s.Keys[apitest.Priya])
					req.Header.Set("Content-Type", "application/json")
					start := time.Now()
					resp, err := client.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					if mode == "stream" {
						readSSE(b, resp.Body, func(sseEvent) bool { return true })
					} else {
						_, _ = io.Copy(io.Discard, resp.Body)
					}
					ds = append(ds, time.Since(start))
					resp.Body.Close()
				}
				b.ReportMetric(float64(pct(ds, 0.5).Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(pct(ds, 0.99).Microseconds())/1000, "p99-ms")
				b.ReportMetric(0, "ns/op")
			}
		})
	}
}

// BenchmarkSSEFanout streams to 200 concurrent SSE clients over loopback
// and reports the events delivered per second, in total:
//   - live, runs=1: 200 clients follow one running run of 35 steps;
//   - live, runs=200: each client follows its own running run;
//   - recorded: 200 clients read one finished run's log from the start.
//
// Run with -benchtime 1x.
func BenchmarkSSEFanout(b *testing.B) {
	const clients, steps = 200, 35 // the demo agent allows 40 steps
	for _, c := range []struct {
		name     string
		runs     int
		recorded bool
	}{{"live/runs=1", 1, false}, {"live/runs=200", 200, false}, {"recorded/runs=1", 1, true}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				// Live: the runs wait until every client is connected.
				s := benchServer(b, longScript(steps), !c.recorded)
				ctx := context.Background()
				cl := apiclient.New(s.HTTP.URL, s.Keys[apitest.Priya])
				cl.HTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: 0}}
				runs := make([]string, c.runs)
				for i := range runs {
					r, _, err := cl.CreateRun(ctx, apiclient.CreateRunRequest{Agent: apitest.DemoAgent, Input: fmt.Sprintf("bench %d", i)}, "")
					if err != nil {
						b.Fatal(err)
					}
					runs[i] = r.ID
				}
				if c.recorded {
					for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
						r, err := cl.GetRun(ctx, runs[0])
						if err != nil {
							b.Fatal(err)
						}
						if store.Terminal(r.Status) {
							break
						}
						if time.Now().After(deadline) {
							b.Fatal("the run did not finish")
						}
					}
				}
				var delivered atomic.Int64
				var lagMu sync.Mutex
				var lags []time.Duration
				var wg, connected sync.WaitGroup
				start := time.Now()
				for i := range clients {
					wg.Add(1)
					connected.Add(1)
					go func() {
						defer wg.Done()
						once := sync.OnceFunc(connected.Done)
						defer once()
						// Wait for the stream's first bytes (the retry hint), so every
						// client is connected before the runs start.
						cl := *cl
						cl.HTTP = &http.Client{Transport: connectedTransport{cl.HTTP.Transport, once}}
						var mine []time.Duration
						end, err := cl.Follow(ctx, runs[i%len(runs)], 0, func(ev apiclient.Event) error {
							delivered.Add(1)
							mine = append(mine, time.Since(ev.At))
							return nil
						})
						lagMu.Lock()
						lags = append(lags, mine...)
						lagMu.Unlock()
						if err != nil || !store.Terminal(end.Status) {
							b.Errorf("client %d: %v %+v", i, err, end)
						}
					}()
				}
				connected.Wait()
				if !c.recorded {
					start = time.Now()
					if err := s.API.StartWorkers(); err != nil {
						b.Fatal(err)
					}
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.ReportMetric(float64(delivered.Load())/elapsed.Seconds(), "events/s")
				b.ReportMetric(float64(delivered.Load())/float64(clients), "events/client")
				b.ReportMetric(elapsed.Seconds(), "s")
				if !c.recorded {
					// From the event's append (its time) to a client's callback.
					b.ReportMetric(float64(pct(lags, 0.5).Microseconds())/1000, "lag-p50-ms")
					b.ReportMetric(float64(pct(lags, 0.99).Microseconds())/1000, "lag-p99-ms")
				}
				b.ReportMetric(0, "ns/op")
			}
		})
	}
}

// connectedTransport calls done once a response's headers arrived.
type connectedTransport struct {
	next http.RoundTripper
	done func()
}

func (t connectedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	t.done()
	return resp, err
}
