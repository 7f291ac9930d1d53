package tail_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/sqlite"
	"github.com/agentplane/agentplane/trace"
	"github.com/agentplane/agentplane/trace/tail"
)

// logs is a fake event reader: only what was committed is read.
type logs struct {
	mu        sync.Mutex
	committed map[string][]store.Event
}

func (l *logs) Events(_ context.Context, runID string, after int64, _ int) ([]store.Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []store.Event
	for _, ev := range l.committed[runID] {
		if ev.Seq > after {
			out = append(out, ev)
		}
	}
	return out, nil
}

func (l *logs) commit(runID string, types ...string) (first, last int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ty := range types {
		seq := int64(len(l.committed[runID]) + 1)
		if first == 0 {
			first = seq
		}
		last = seq
		l.committed[runID] = append(l.committed[runID], store.Event{RunID: runID, Seq: seq, Type: ty})
	}
	return first, last
}

// recorder is a sink noting what it was told.
type recorder struct {
	mu   sync.Mutex
	seen []string
}

func (r *recorder) Run(id string) tail.RunSink { return &recRun{r, id} }

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

type recRun struct {
	r  *recorder
	id string
}

func (rr *recRun) Event(ev *store.Event, live bool) {
	rr.r.mu.Lock()
	defer rr.r.mu.Unlock()
	rr.r.seen = append(rr.r.seen, fmt.Sprintf("%s:%d:%v", rr.id, ev.Seq, live))
}

func (rr *recRun) Close() {
	rr.r.mu.Lock()
	defer rr.r.mu.Unlock()
	rr.r.seen = append(rr.r.seen, rr.id+":close")
}

// appendTo commits events to run's log and tells the tail.
func appendTo(tl *tail.Tail, l *logs, run string, types ...string) {
	first, last := l.commit(run, types...)
	tl.Appended(run, first, last)
}

func start(t *testing.T, l *logs, r *recorder, maxRuns int) *tail.Tail {
	t.Helper()
	tl := tail.New(tail.Options{Events: l, Sinks: []tail.Sink{r}, Poll: 5 * time.Millisecond, MaxRuns: maxRuns})
	if err := tl.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tl.Stop)
	return tl
}

func sync1(t *testing.T, tl *tail.Tail) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tl.Sync(ctx); err != nil {
		t.Fatal(err)
	}
}

// Events reach the sinks in order, once, live; the run is closed at its end.
func TestEventsInOrderOnce(t *testing.T) {
	l, r := &logs{committed: map[string][]store.Event{}}, &recorder{}
	tl := start(t, l, r, 0)
	appendTo(tl, l, "a", trace.EvRunStarted, trace.EvStepStarted)
	appendTo(tl, l, "a", trace.EvModelCall)
	sync1(t, tl)
	appendTo(tl, l, "a", trace.EvRunCompleted)
	sync1(t, tl)
	want := []string{"a:1:true", "a:2:true", "a:3:true", "a:4:true", "a:close"}
	if got := r.got(); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// An append reported before it is committed (a buffered append) is
// delivered once the commit is visible, not before and not guessed.
func TestWaitsForTheCommit(t *testing.T) {
	l, r := &logs{committed: map[string][]store.Event{}}, &recorder{}
	tl := start(t, l, r, 0)
	tl.Appended("a", 1, 2) // nothing committed yet
	time.Sleep(30 * time.Millisecond)
	if got := r.got(); len(got) != 0 {
		t.Fatalf("delivered before the commit: %v", got)
	}
	l.commit("a", trace.EvRunStarted, trace.EvStepStarted)
	sync1(t, tl)
	if got := r.got(); !slices.Equal(got, []string{"a:1:true", "a:2:true"}) {
		t.Fatalf("got %v", got)
	}
}

// A run first seen part way (taken over after a crash) has its earlier
// events replayed as not live, so nothing is counted or sent twice.
func TestRunSeenPartWay(t *testing.T) {
	l, r := &logs{committed: map[string][]store.Event{}}, &recorder{}
	l.commit("a", trace.EvRunStarted, trace.EvStepStarted, trace.EvModelCall)
	tl := start(t, l, r, 0)
	appendTo(tl, l, "a", trace.EvStepStarted)
	sync1(t, tl)
	want := []string{"a:1:false", "a:2:false", "a:3:false", "a:4:true"}
	if got := r.got(); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// Past MaxRuns the least recently active run is forgotten and, when it
// appends again, taken up with its earlier events not live.
func TestForgetsTheOldestRun(t *testing.T) {
	l, r := &logs{committed: map[string][]store.Event{}}, &recorder{}
	tl := start(t, l, r, 1)
	appendTo(tl, l, "a", trace.EvRunStarted)
	sync1(t, tl)
	appendTo(tl, l, "b", trace.EvRunStarted)
	sync1(t, tl)
	appendTo(tl, l, "a", trace.EvStepStarted)
	sync1(t, tl)
	want := []string{"a:1:true", "a:close", "b:1:true", "b:close", "a:1:false", "a:2:true"}
	if got := r.got(); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// Wrap observes a store's appends without the caller knowing.
func TestWrapObservesAppends(t *testing.T) {
	l, r := &logs{committed: map[string][]store.Event{}}, &recorder{}
	tl := start(t, l, r, 0)
	s := tl.Wrap(appender{l: l})
	if err := s.Append(context.Background(), store.AppendRequest{RunID: "a", Events: []store.Event{{Type: trace.EvRunStarted}}}); err != nil {
		t.Fatal(err)
	}
	sync1(t, tl)
	if got := r.got(); !slices.Equal(got, []string{"a:1:true"}) {
		t.Fatalf("got %v", got)
	}
}

// appender commits each append into logs (the rest of store.Store is
// not used).
type appender struct {
	store.Store
	l *logs
}

func (a appender) Append(_ context.Context, req store.AppendRequest) error {
	for i := range req.Events {
		first, _ := a.l.commit(req.RunID, req.Events[i].Type)
		req.Events[i].Seq = first
	}
	return nil
}

// readCounter is the SQLite store with its reads of the log counted; it
// still feeds its commits (the embedded methods).
type readCounter struct {
	*sqlite.Store
	mu    sync.Mutex
	reads int
}

func (r *readCounter) Events(ctx context.Context, runID string, after int64, limit int) ([]store.Event, error) {
	r.mu.Lock()
	r.reads++
	r.mu.Unlock()
	return r.Store.Events(ctx, runID, after, limit)
}

// On a store that feeds its commits the tail delivers what committed,
// buffered or durable, without reading the log back, and never an append
// the store refused; a run the tail first sees part way is read back once
// for its earlier events.
func TestCommitFeed(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rc := &readCounter{Store: st}
	now := time.Now()
	epochs := map[string]int64{}
	heads := map[string][32]byte{}
	seqs := map[string]int64{}
	for _, id := range []string{"r1", "r2"} {
		if err := st.CreateRun(ctx, &store.Run{ID: id, Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x",
			Mode: "async", Status: store.StatusQueued, CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
		r, err := st.ClaimRunByID(ctx, id, "w", time.Minute, now)
		if err != nil {
			t.Fatal(err)
		}
		epochs[id] = r.LeaseEpoch
	}
	add := func(id string, durable bool, epoch int64, types ...string) error {
		var evs []store.Event
		head, seq := heads[id], seqs[id]
		for _, ty := range types {
			seq++
			ev := store.Event{RunID: id, Seq: seq, Type: ty, At: now, Payload: []byte(`{"n":` + fmt.Sprint(seq) + `}`), PrevHash: head}
			ev.Hash = store.ChainHash(head, &ev)
			head = ev.Hash
			evs = append(evs, ev)
		}
		err := st.Append(ctx, store.AppendRequest{RunID: id, Epoch: epoch, Events: evs, Durable: durable})
		if err == nil { // a buffered append is expected to commit
			heads[id], seqs[id] = head, seq
		}
		return err
	}
	// r2 has events before the tail follows it.
	if err := add("r2", true, epochs["r2"], trace.EvRunStarted, trace.EvStepStarted); err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	tl := tail.New(tail.Options{Events: rc, Sinks: []tail.Sink{r}, Poll: time.Hour})
	if err := tl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tl.Stop)

	if err := add("r1", false, epochs["r1"], trace.EvRunStarted, trace.EvStepStarted); err != nil {
		t.Fatal(err)
	}
	if err := add("r1", true, epochs["r1"], trace.EvModelCall); err != nil {
		t.Fatal(err)
	}
	// A fenced-out worker's append is refused and must not be delivered.
	if err := add("r1", true, epochs["r1"]+7, trace.EvToolAttempt); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("fenced append: %v, want ErrLeaseLost", err)
	}
	sync1(t, tl)
	if got, want := r.got(), []string{"r1:1:true", "r1:2:true", "r1:3:true"}; !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	if rc.reads != 0 {
		t.Fatalf("the tail read the log back %d times; the feed handed it every event", rc.reads)
	}

	if err := add("r2", false, epochs["r2"], trace.EvModelCall); err != nil {
		t.Fatal(err)
	}
	if err := add("r2", true, epochs["r2"], trace.EvRunCompleted); err != nil {
		t.Fatal(err)
	}
	sync1(t, tl)
	want := []string{"r1:1:true", "r1:2:true", "r1:3:true", "r2:1:false", "r2:2:false", "r2:3:true", "r2:4:true", "r2:close"}
	if got := r.got(); !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	if rc.reads != 1 {
		t.Fatalf("the tail read the log back %d times, want once (r2's events before it followed)", rc.reads)
	}
}
