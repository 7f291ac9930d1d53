package sandbox_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/sandbox"
)

// fakeExecutor makes sandboxes whose Destroy waits for release: enough to
// test the Manager's bookkeeping without a real runtime.
type fakeExecutor struct {
	n       atomic.Int64
	release chan struct{}
}

func (f *fakeExecutor) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{Name: "fake", Tier: 2}
}
func (f *fakeExecutor) Available() error { return nil }
func (f *fakeExecutor) Create(context.Context, sandbox.Spec) (sandbox.Sandbox, error) {
	return &fakeBox{id: "fake-" + string(rune('a'+f.n.Add(1))), release: f.release}, nil
}

type fakeBox struct {
	id      string
	release chan struct{}
	once    sync.Once
}

func (b *fakeBox) ID() string { return b.id }
func (b *fakeBox) Exec(context.Context, sandbox.Exec) (sandbox.Result, error) {
	return sandbox.Result{Outcome: sandbox.OutcomeOK}, nil
}
func (b *fakeBox) WriteFile(context.Context, string, []byte) error { return nil }
func (b *fakeBox) ReadFile(context.Context, string, int64) ([]byte, error) {
	return nil, nil
}
func (b *fakeBox) EgressSocket() string { return "" }
func (b *fakeBox) Destroy(context.Context) error {
	b.once.Do(func() { <-b.release })
	return nil
}

// A run that ends while the reaper is still destroying its idle sandbox
// reports that teardown (by the reaper) exactly once, and the sessions of
// two tools of one run are two sandboxes.
func TestEndRunSeesTheReaperMidDestroy(t *testing.T) {
	f := &fakeExecutor{release: make(chan struct{})}
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	m := sandbox.NewManager(sandbox.ManagerOptions{Executors: map[int]sandbox.Executor{2: f}, Warm: map[int]int{2: -1},
		IdleTTL: time.Minute, ReapEvery: time.Hour, Clock: clock})
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(f.release)
		m.Stop()
	}()
	run := func(tool string) sandbox.Call {
		c, err := m.Run(ctx, sandbox.Request{Tier: 2, Tenant: "acme", RunID: "r1", Tool: tool, Exec: sandbox.Exec{Argv: []string{"true"}}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := run("tool_a"), run("tool_b")
	if a.Boundary.ID == b.Boundary.ID {
		t.Fatalf("two tools of one run share sandbox %s", a.Boundary.ID)
	}
	if again := run("tool_a"); again.Boundary.ID != a.Boundary.ID || again.Boundary.Lifecycle != sandbox.LifecycleReused {
		t.Fatalf("a tool's second call got %s (%s), want its session %s", again.Boundary.ID, again.Boundary.Lifecycle, a.Boundary.ID)
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	reaped := make(chan struct{})
	go func() { m.Reap(); close(reaped) }()
	// The reaper now blocks in Destroy; the run ends meanwhile.
	deadline := time.Now().Add(5 * time.Second)
	for len(m.Sessions()) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the reaper did not take the sessions")
		}
		time.Sleep(time.Millisecond)
	}
	got := m.EndRun(ctx, "acme", "r1")
	if len(got) != 2 {
		t.Fatalf("EndRun during the reaper's destroy reported %+v, want both sandboxes", got)
	}
	for _, td := range got {
		if td.By != sandbox.TeardownReaper {
			t.Fatalf("teardown %+v, want by reaper", td)
		}
	}
	if again := m.EndRun(ctx, "acme", "r1"); len(again) != 0 {
		t.Fatalf("reported twice: %+v", again)
	}
	close(f.release)
	f.release = make(chan struct{}) // Stop's destroys must not block
	<-reaped
}

// scriptedExecutor makes sandboxes whose commands end as next says.
type scriptedExecutor struct {
	n    atomic.Int64
	mu   sync.Mutex
	next sandbox.Result
	made []*scriptedBox
}

func (f *scriptedExecutor) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{Name: "scripted", Tier: 3}
}
func (f *scriptedExecutor) Available() error { return nil }
func (f *scriptedExecutor) Create(context.Context, sandbox.Spec) (sandbox.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := &scriptedBox{f: f, id: "scripted-" + string(rune('a'+f.n.Add(1)))}
	f.made = append(f.made, b)
	return b, nil
}

type scriptedBox struct {
	f         *scriptedExecutor
	id        string
	destroyed atomic.Bool
}

func (b *scriptedBox) ID() string { return b.id }
func (b *scriptedBox) Exec(context.Context, sandbox.Exec) (sandbox.Result, error) {
	b.f.mu.Lock()
	defer b.f.mu.Unlock()
	return b.f.next, nil
}
func (b *scriptedBox) WriteFile(context.Context, string, []byte) error { return nil }
func (b *scriptedBox) ReadFile(context.Context, string, int64) ([]byte, error) {
	return nil, nil
}
func (b *scriptedBox) EgressSocket() string { return "" }
func (b *scriptedBox) Destroy(context.Context) error {
	b.destroyed.Store(true)
	return nil
}

// TestHostile_UncleanCommandDestroysSandbox (issue 15, class 1): a sandbox
// whose command did not end cleanly (the host's timer fired, it was
// killed, its wrapper was gone, processes outlived it) is destroyed at once
// and never serves the run's next call; a clean one keeps its session.
func TestHostile_UncleanCommandDestroysSandbox(t *testing.T) {
	for _, c := range []struct {
		name  string
		res   sandbox.Result
		clean bool
	}{
		{"Clean", sandbox.Result{Outcome: sandbox.OutcomeOK}, true},
		{"NonZeroExit", sandbox.Result{Outcome: sandbox.OutcomeNonZero, ExitCode: 3}, true},
		{"TimedOut", sandbox.Result{Outcome: sandbox.OutcomeTimeout, ExitCode: 137, Unclean: "the host's timer fired"}, false},
		{"TimedOutUnmarked", sandbox.Result{Outcome: sandbox.OutcomeTimeout, ExitCode: 137}, false},
		{"Killed", sandbox.Result{Outcome: sandbox.OutcomeKilled, ExitCode: 137, Signal: "SIGKILL"}, false},
		{"WrapperGone", sandbox.Result{Outcome: sandbox.OutcomeOK, Unclean: "the wrapper's report did not arrive"}, false},
		{"ProcessesOutlived", sandbox.Result{Outcome: sandbox.OutcomeNonZero, ExitCode: 1, Unclean: "2 processes outlived the command"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &scriptedExecutor{next: c.res}
			var tds []sandbox.Teardown
			var mu sync.Mutex
			m := sandbox.NewManager(sandbox.ManagerOptions{Executors: map[int]sandbox.Executor{3: f}, Warm: map[int]int{3: -1},
				ReapEvery: time.Hour, OnTeardown: func(td sandbox.Teardown) { mu.Lock(); tds = append(tds, td); mu.Unlock() }})
			ctx := context.Background()
			if err := m.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer m.Stop()
			req := sandbox.Request{Tier: 3, Tenant: "acme", RunID: "r1", Tool: "run_python", Exec: sandbox.Exec{Argv: []string{"true"}}}
			first, err := m.Run(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			f.mu.Lock()
			f.next = sandbox.Result{Outcome: sandbox.OutcomeOK}
			box := f.made[0]
			f.mu.Unlock()
			second, err := m.Run(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if c.clean {
				if box.destroyed.Load() || first.Boundary.Teardown != "" || second.Boundary.ID != first.Boundary.ID || second.Boundary.Lifecycle != sandbox.LifecycleReused {
					t.Fatalf("a clean command's sandbox was not kept for the session: destroyed %v, teardown %q, next call on %s (%s)",
						box.destroyed.Load(), first.Boundary.Teardown, second.Boundary.ID, second.Boundary.Lifecycle)
				}
				return
			}
			if !box.destroyed.Load() || first.Boundary.Teardown != sandbox.TeardownCaller {
				t.Fatalf("an unclean command's sandbox was kept: destroyed %v, teardown %q", box.destroyed.Load(), first.Boundary.Teardown)
			}
			if second.Boundary.ID == first.Boundary.ID || second.Boundary.Lifecycle == sandbox.LifecycleReused {
				t.Fatalf("the next call ran in the unclean sandbox %s (%s)", second.Boundary.ID, second.Boundary.Lifecycle)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(tds) != 1 || tds[0].ID != first.Boundary.ID || tds[0].By != sandbox.TeardownCaller || tds[0].Reason == "" {
				t.Fatalf("teardowns %+v", tds)
			}
		})
	}
}
