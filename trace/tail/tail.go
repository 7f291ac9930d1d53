// Package tail follows the committed events of every run a process
// appends to and hands them, in order per run, to sinks: the live
// OpenTelemetry export (trace/otelexport.Live) and the Prometheus metrics
// (trace/runmetrics). Nothing in the loop or the engine knows about it.
// What a sink sees is exactly what the log holds, never an event whose
// commit later failed: on a store that feeds its commits
// (store.CommitFeed, the SQLite store) the tail is handed each append's
// events once they are committed and reads nothing back; on any other an
// append is observed at the store (Wrap, or Appended from another
// decorator) and its events are read back from the log once committed.
//
// Observing an append costs the run a map update under a mutex; reading
// and deriving happen in the tail's own goroutine. A run the tail first
// sees part way (a process took it over after a crash, or the tail forgot
// it) has its earlier events replayed to the sinks with live false, so
// their state is right and nothing is counted or exported twice.
package tail

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// Sink receives the events of every followed run.
type Sink interface {
	// Run returns what follows one run. It is called from the tail's
	// goroutine only, as are the methods of what it returns.
	Run(runID string) RunSink
}

// RunSink follows one run's events.
type RunSink interface {
	// Event is called with each committed event in sequence order. live
	// is false for events appended before this process followed the run
	// (their effect was reported by whoever appended them).
	Event(ev *store.Event, live bool)
	// Close is called when the run ended or the tail forgets it.
	Close()
}

// Options configure New.
type Options struct {
	// Events reads committed events (the platform's store).
	Events interface {
		Events(ctx context.Context, runID string, after int64, limit int) ([]store.Event, error)
	}
	Sinks []Sink
	// Poll is how often runs whose appends were not yet committed are
	// read again (default 200ms).
	//
	// When Events is a store.CommitFeed the tail takes the committed
	// events from it, and Appended and Wrap observe nothing.
	Poll time.Duration
	// MaxRuns bounds the runs followed at once (default 10000); past it
	// the least recently active is forgotten, and taken up again, its
	// earlier events replayed, if it appends again.
	MaxRuns int
	Logger  *slog.Logger
}

// Tail follows runs. Its methods are safe for concurrent use; Stop is
// idempotent.
type Tail struct {
	o Options

	mu      sync.Mutex
	pending map[string]*want // runs with appends not yet delivered
	wake    chan struct{}

	runs map[string]*follow // the tail goroutine's own
	tick int64

	// feed is Options.Events as a commit feed (nil: read back);
	// unfeed stops it.
	feed   store.CommitFeed
	unfeed func()

	stop    sync.Once
	cancel  context.CancelFunc
	done    chan struct{}
	synced  *sync.Cond
	running bool
}

// want is what the appends of one run asked for.
type want struct {
	from, to int64 // first and last sequence number appended
	// held are committed events handed by the commit feed and not yet
	// taken by a pass, contiguous in seq (at most maxHeld; past it they
	// are dropped and read back instead).
	held []store.Event
}

// maxHeld bounds the committed events held for one run while the tail's
// goroutine is behind.
const maxHeld = 4096

type follow struct {
	cursor int64
	sinks  []RunSink
	active int64
}

// New makes a tail; Start starts it.
func New(o Options) *Tail {
	if o.Poll <= 0 {
		o.Poll = 200 * time.Millisecond
	}
	if o.MaxRuns <= 0 {
		o.MaxRuns = 10000
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	t := &Tail{o: o, pending: map[string]*want{}, wake: make(chan struct{}, 1), runs: map[string]*follow{}, done: make(chan struct{})}
	t.synced = sync.NewCond(&t.mu)
	return t
}

// Appended tells the tail that events first..last of runID were appended.
// It never blocks on the tail's work.
func (t *Tail) Appended(runID string, first, last int64) {
	if t.feed != nil {
		return // the commit feed tells of it, once committed
	}
	t.mu.Lock()
	w := t.pending[runID]
	if w == nil {
		t.pending[runID] = &want{from: first, to: last}
	} else {
		w.from, w.to = min(w.from, first), max(w.to, last)
	}
	t.mu.Unlock()
	t.poke()
}

func (t *Tail) poke() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// committed takes the events of one committed append from the feed.
func (t *Tail) committed(runID string, evs []store.Event) {
	first, last := evs[0].Seq, evs[len(evs)-1].Seq
	t.mu.Lock()
	w := t.pending[runID]
	if w == nil {
		w = &want{from: first, to: last}
		t.pending[runID] = w
	} else {
		w.from, w.to = min(w.from, first), max(w.to, last)
	}
	if n := len(w.held); n > 0 && (w.held[n-1].Seq+1 != first || n+len(evs) > maxHeld) {
		w.held = nil // read back from the log instead
	}
	if len(w.held)+len(evs) <= maxHeld {
		w.held = append(w.held, evs...)
	}
	t.mu.Unlock()
	t.poke()
}

// Wrap returns s with its Append observed: after each successful append
// the tail is told of it.
func (t *Tail) Wrap(s store.Store) store.Store { return &observed{Store: s, t: t} }

type observed struct {
	store.Store
	t *Tail
}

func (o *observed) Append(ctx context.Context, req store.AppendRequest) error {
	err := o.Store.Append(ctx, req)
	if err == nil && len(req.Events) > 0 {
		o.t.Appended(req.RunID, req.Events[0].Seq, req.Events[len(req.Events)-1].Seq)
	}
	return err
}

// Start starts the tail's goroutine; it stops with ctx or Stop.
func (t *Tail) Start(ctx context.Context) error {
	if t.o.Events == nil {
		return errors.New("tail: no event reader")
	}
	ctx, t.cancel = context.WithCancel(ctx)
	t.mu.Lock()
	t.running = true
	t.mu.Unlock()
	if f, ok := t.o.Events.(store.CommitFeed); ok {
		t.feed = f
		t.unfeed = f.FeedCommits(t.committed)
	}
	go t.loop(ctx)
	return nil
}

// Stop delivers what is committed, closes every run sink and stops.
func (t *Tail) Stop() {
	t.stop.Do(func() {
		if t.cancel == nil {
			return
		}
		t.cancel()
		<-t.done
		if t.unfeed != nil {
			t.unfeed()
		}
	})
}

// Sync waits until every append reported before the call was delivered,
// or ctx ends (tests; a clean shutdown).
func (t *Tail) Sync(ctx context.Context) error {
	if t.feed != nil {
		// Appends reported but not yet committed are not pending yet.
		if err := t.feed.Flush(ctx, ""); err != nil {
			return err
		}
	}
	stop := context.AfterFunc(ctx, func() {
		t.mu.Lock()
		t.synced.Broadcast()
		t.mu.Unlock()
	})
	defer stop()
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.pending) > 0 && t.running {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		select {
		case t.wake <- struct{}{}:
		default:
		}
		t.synced.Wait()
	}
	return ctx.Err()
}

func (t *Tail) loop(ctx context.Context) {
	defer close(t.done)
	tick := time.NewTicker(t.o.Poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			// One last pass over what is committed, then let go.
			t.pass(context.WithoutCancel(ctx))
			t.mu.Lock()
			t.running = false
			t.synced.Broadcast()
			t.mu.Unlock()
			for id, f := range t.runs {
				t.forget(id, f)
			}
			return
		case <-t.wake:
		case <-tick.C:
		}
		t.pass(ctx)
	}
}

// pass delivers what is committed of every pending run.
func (t *Tail) pass(ctx context.Context) {
	t.mu.Lock()
	work := make(map[string]want, len(t.pending))
	for id, w := range t.pending {
		work[id] = *w
		w.held = nil // taken: what the feed hands next starts anew
	}
	t.mu.Unlock()
	for id, w := range work {
		done, ended, err := t.deliver(ctx, id, w)
		if err != nil {
			t.o.Logger.Warn("telemetry: reading the log failed; will retry", "run", id, "err", err)
		}
		t.mu.Lock()
		// An append noted while this pass read the log may name events the
		// pass already delivered; once the run's terminal event is
		// delivered, nothing it names is new (the run was forgotten, and
		// following it again would deliver its log a second time).
		if cur := t.pending[id]; cur != nil && (done && cur.to <= w.to || ended > 0 && cur.to <= ended) {
			delete(t.pending, id)
		}
		t.mu.Unlock()
	}
	t.mu.Lock()
	t.synced.Broadcast()
	t.mu.Unlock()
}

// deliver feeds the sinks of run id with its committed events up to w.to
// and reports whether it got there, and the sequence number of the run's
// terminal event when it delivered it (0 otherwise).
func (t *Tail) deliver(ctx context.Context, id string, w want) (bool, int64, error) {
	f := t.runs[id]
	if f == nil {
		f = &follow{}
		for _, s := range t.o.Sinks {
			f.sinks = append(f.sinks, s.Run(id))
		}
		t.runs[id] = f
	}
	t.tick++
	f.active = t.tick
	t.evict()
	if f.cursor >= w.to {
		return true, 0, nil
	}
	evs := w.held
	for len(evs) > 0 && evs[0].Seq <= f.cursor {
		evs = evs[1:]
	}
	if len(evs) == 0 || evs[0].Seq != f.cursor+1 {
		// Not (all) held: what is committed is read back from the log.
		var err error
		if evs, err = t.o.Events.Events(ctx, id, f.cursor, 0); err != nil {
			return false, 0, err
		}
		if t.feed != nil {
			// An event past w.to is committed but not yet fed: the feed
			// hands it over next, and delivering it now would deliver it
			// twice (after the run's end, to a run followed anew).
			for len(evs) > 0 && evs[len(evs)-1].Seq > w.to {
				evs = evs[:len(evs)-1]
			}
		}
	}
	fresh := f.cursor == 0
	for i := range evs {
		ev := &evs[i]
		if ev.Seq != f.cursor+1 {
			break // never a gap: the rest is read again next pass
		}
		live := !fresh || ev.Seq >= w.from
		for _, s := range f.sinks {
			s.Event(ev, live)
		}
		f.cursor = ev.Seq
		if ev.Type == trace.EvRunCompleted || ev.Type == trace.EvRunFailed {
			t.forget(id, f)
			return true, ev.Seq, nil
		}
	}
	return f.cursor >= w.to, 0, nil
}

func (t *Tail) forget(id string, f *follow) {
	for _, s := range f.sinks {
		s.Close()
	}
	delete(t.runs, id)
}

// evict forgets the least recently active run while too many are followed.
func (t *Tail) evict() {
	for len(t.runs) > t.o.MaxRuns {
		var oldest string
		var at int64
		for id, f := range t.runs {
			if oldest == "" || f.active < at {
				oldest, at = id, f.active
			}
		}
		t.forget(oldest, t.runs[oldest])
	}
}
