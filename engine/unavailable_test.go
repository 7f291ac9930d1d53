package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
)

// flakyAppends is a store whose appends, from the from-th on, fail with
// store.ErrUnavailable: fail of them in a row (-1: all), each after
// committing when commit is set (the connection broke after the commit).
type flakyAppends struct {
	store.Store
	mu      sync.Mutex
	from    int
	fail    int
	commit  bool
	appends int // calls made
	failed  int
}

func (f *flakyAppends) Append(ctx context.Context, req store.AppendRequest) error {
	f.mu.Lock()
	f.appends++
	fail := f.appends >= f.from && (f.fail < 0 || f.failed < f.fail)
	if fail {
		f.failed++
	}
	f.mu.Unlock()
	if !fail {
		return f.Store.Append(ctx, req)
	}
	if f.commit {
		if err := f.Store.Append(ctx, req); err != nil {
			return err
		}
	}
	return fmt.Errorf("flaky store: %w", store.ErrUnavailable)
}

// TestAppendUnavailable: an append the store cannot take now is retried
// with backoff; a blip costs nothing (each effect runs once, the log
// verifies), an append that committed but was reported failed is found
// in the log rather than written twice, and a store that stays
// unavailable fails the run visibly instead of leaving it running.
func TestAppendUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name       string
		fail       int
		commit     bool
		wantStatus string
	}{
		{"blip", 3, false, store.StatusCompleted},
		{"committed but reported failed", 1, true, store.StatusCompleted},
		{"stays unavailable", -1, false, store.StatusFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := openStore(t, t.TempDir())
			if err := s.CreateRun(ctx, &store.Run{ID: "r", Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x", Mode: "async"}); err != nil {
				t.Fatal(err)
			}
			flaky := &flakyAppends{Store: s, from: 3, fail: tc.fail, commit: tc.commit}
			c := &counter{n: 4}
			c.crashAt.Store(-1)
			w, err := engine.New(engine.Options{Store: flaky, Workflow: c.workflow, Activities: c.activities(), Owner: "w",
				LeaseTTL: time.Minute, Retry: engine.RetryPolicy{Backoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			run, err := w.Execute(ctx, "r")
			if tc.wantStatus == store.StatusFailed {
				if !errors.Is(err, store.ErrUnavailable) {
					t.Fatalf("Execute with the store down: %v, want the append's ErrUnavailable", err)
				}
				run, err = s.GetRun(ctx, "r")
			}
			if err != nil {
				t.Fatal(err)
			}
			if run.Status != tc.wantStatus || run.LeaseOwner != "" {
				t.Fatalf("run is %s (lease %q, result %q), want %s and no lease", run.Status, run.LeaseOwner, run.Result, tc.wantStatus)
			}
			evs, err := s.Events(ctx, "r", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := w.Verify(ctx, "r"); tc.wantStatus == store.StatusCompleted && err != nil {
				t.Fatalf("the log does not verify: %v", err)
			}
			switch tc.wantStatus {
			case store.StatusCompleted:
				if got := c.executed.Load(); got != 4 {
					t.Fatalf("effects executed %d times, want 4 (once each)", got)
				}
				if flaky.failed == 0 {
					t.Fatal("no append failed: the test tested nothing")
				}
			case store.StatusFailed:
				if !strings.Contains(run.Result, "log could not be written") || strings.Contains(run.Result, "flaky store") {
					t.Fatalf("result %q: want the reason, without the store's own words", run.Result)
				}
				if flaky.failed < 6 {
					t.Fatalf("the append was tried %d times, want the retries", flaky.failed)
				}
				for _, ev := range evs {
					if ev.Type == "done" {
						t.Fatal("the run recorded its end although its log could not be written")
					}
				}
			}
		})
	}
}
