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
