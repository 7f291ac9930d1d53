package api_test

import (
	"bufio"
	"context"
	"fmt"
	"github.com/agentplane/agentplane/runs"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/api/apitest"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/model/scripted"
	"github.com/agentplane/agentplane/store"
)

// refundFirst is a script whose first turn asks for a refund above the
// approval threshold: every run waits for a supervisor after one step.
const refundFirst = `
turns:
  - text: "Refunding the duplicate charge."
    tool_calls:
      - name: issue_refund
        args: {customer_id: c_88213, transaction_id: txn_1002, amount_inr: 12499}
  - text: "Refund issued."
`

// parked is what a process holding many waiting runs measured.
type parked struct {
	runs                     int
	parkTime                 time.Duration
	goroutinesIdle           int
	goroutinesParked         int
	rssIdleMiB, rssParkedMiB float64
	heapParkedMiB            float64
	claimIdle                time.Duration // one ClaimRun that finds nothing, with every run waiting
}

func rssMiB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return -1
}

func settledGoroutines() int {
	runtime.GC()
	time.Sleep(200 * time.Millisecond)
	return runtime.NumGoroutine()
}

// parkRuns starts n runs through the API's admission path (platform
// StartRun, as POST /v1/runs does) and waits until every one waits for its
// approval, holding no worker.
func parkRuns(tb testing.TB, n int) (*apitest.Server, parked, []string) {
	tb.Helper()
	script, err := scripted.Parse("refund-first.yaml", []byte(refundFirst))
	if err != nil {
		tb.Fatal(err)
	}
	s := apitest.Start(tb, apitest.Options{
		Platform: func(o *platform.Options) { o.Script = script },
		API:      func(o *api.Options) { o.Workers, o.InteractiveWorkers, o.NoWorkers = 16, 1, true },
	})
	ctx := context.Background()
	m := parked{runs: n, goroutinesIdle: settledGoroutines(), rssIdleMiB: rssMiB()}
	ids := make([]string, n)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				r, err := s.Platform.Runs.Start(ctx, runs.StartRequest{Agent: apitest.DemoAgent, Task: "refund " + strconv.Itoa(i),
					Tenant: apitest.BankTenant, User: apitest.Priya, Mode: "async"})
				if err != nil {
					tb.Error(err)
					return
				}
				ids[i] = r.ID
			}
		}()
	}
	wg.Wait()
	if err := s.API.StartWorkers(); err != nil {
		tb.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		rs, err := s.Platform.Store.ListRuns(ctx, store.RunFilter{Tenant: apitest.BankTenant, Status: store.StatusWaiting})
		if err != nil {
			tb.Fatal(err)
		}
		if len(rs) == n {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d runs waiting after 30 minutes", len(rs), n)
		}
	}
	m.parkTime = time.Since(start)
	time.Sleep(300 * time.Millisecond) // workers go back to polling
	m.goroutinesParked, m.rssParkedMiB = settledGoroutines(), rssMiB()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.heapParkedMiB = float64(ms.HeapInuse) / (1 << 20)
	t0 := time.Now()
	if _, err := s.Platform.Store.ClaimRun(ctx, "probe", time.Minute, time.Now()); err != store.ErrNotFound {
		tb.Fatalf("ClaimRun with every run waiting: %v", err)
	}
	m.claimIdle = time.Since(t0)
	return s, m, ids
}

func (m parked) String() string {
	return fmt.Sprintf("%d runs parked in %v; goroutines %d idle, %d with every run waiting; RSS %.0f MiB idle, %.0f MiB parked (Go heap in use %.0f MiB); a ClaimRun finding nothing takes %v",
		m.runs, m.parkTime.Round(time.Millisecond), m.goroutinesIdle, m.goroutinesParked, m.rssIdleMiB, m.rssParkedMiB, m.heapParkedMiB, m.claimIdle)
}

// TestWaitingRunsHoldNothing: runs waiting for approval hold no goroutine
// and no worker (the goroutine count does not grow with them), and one of
// them resumes when it is decided. BenchmarkWaitingRuns measures 10,000.
func TestWaitingRunsHoldNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("parks 100 runs; skipped with -short")
	}
	const n = 100
	s, m, ids := parkRuns(t, n)
	t.Log(m)
	if grew := m.goroutinesParked - m.goroutinesIdle; grew > 40 {
		t.Fatalf("goroutines grew by %d with %d waiting runs: something holds a goroutine per run", grew, n)
	}
	ctx := context.Background()
	for _, id := range ids[:20] {
		r, err := s.Platform.Store.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != store.StatusWaiting || r.LeaseOwner != "" || r.WakeAt.IsZero() {
			t.Fatalf("run %s: status %s owner %q wake %v", id, r.Status, r.LeaseOwner, r.WakeAt)
		}
	}
	// One of them is decided and completes; the others keep waiting.
	meera := s.Keys[apitest.Meera]
	id := ids[n/2]
	cl := newClient(s, meera)
	r, err := cl.GetRun(ctx, id)
	if err != nil || len(r.PendingApprovals) != 1 {
		t.Fatalf("run %s: %+v %v", id, r, err)
	}
	if _, err := cl.Decide(ctx, r.PendingApprovals[0].ID, decide("approve")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r, err := cl.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status == store.StatusCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the approved run is %s", r.Status)
		}
	}
	open, _, err := s.Platform.Store.Usage(ctx, apitest.BankTenant, nil)
	if err != nil || open != n-1 {
		t.Fatalf("open runs = %d (%v), want %d", open, err, n-1)
	}
}

// BenchmarkWaitingRuns parks AGENTPLANE_WAITING_RUNS runs (default 10,000)
// in one server process and reports goroutines and memory with all of them
// waiting. Run with -benchtime 1x.
func BenchmarkWaitingRuns(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("AGENTPLANE_WAITING_RUNS")); err == nil && v > 0 {
		n = v
	}
	for range b.N {
		_, m, _ := parkRuns(b, n)
		b.Log(m)
		b.ReportMetric(float64(m.runs), "waiting-runs")
		b.ReportMetric(float64(m.goroutinesIdle), "goroutines-idle")
		b.ReportMetric(float64(m.goroutinesParked), "goroutines-parked")
		b.ReportMetric(m.rssIdleMiB, "rss-idle-MiB")
		b.ReportMetric(m.rssParkedMiB, "rss-parked-MiB")
		b.ReportMetric(m.heapParkedMiB, "heap-parked-MiB")
		b.ReportMetric(m.parkTime.Seconds(), "park-s")
		b.ReportMetric(float64(m.claimIdle.Microseconds()), "idle-claim-µs")
	}
}
