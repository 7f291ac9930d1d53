package otelexport

import (
	"context"
	"log/slog"
	"sort"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace/tail"
)

// LiveOptions configure NewLive.
type LiveOptions struct {
	// Exporter sends the spans (NewOTLPExporter).
	Exporter sdktrace.SpanExporter
	Batcher  BatcherOptions
	Provider ProviderFunc
	Logger   *slog.Logger
	// OnDrop, when set, is told of spans that were lost, as in
	// BatcherOptions.OnDrop (the metrics count them).
	OnDrop func(reason string, n int)
}

// maxLost bounds the runs Live remembers as having lost spans.
const maxLost = 1000

// Live derives each run's spans from its committed events as the tail
// delivers them (it is a tail.Sink) and sends them through a Batcher, so
// the run never waits for the collector. Spans that are lost (queue full,
// collector down, slow or refusing) are counted, and the runs they belong
// to are remembered (Lost) and logged: `agentplane trace export RUN`
// derives and sends them again from the log, with the same ids.
type Live struct {
	o  LiveOptions
	b  *Batcher
	tp *sdktrace.TracerProvider

	mu   sync.Mutex
	lost map[string]int64 // run id -> spans lost
}

// NewLive starts the batcher in front of o.Exporter.
func NewLive(o LiveOptions) *Live {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Live{o: o, lost: map[string]int64{}}
	bo := o.Batcher
	bo.Logger = o.Logger
	bo.OnDrop = l.dropped
	l.b = NewBatcher(o.Exporter, bo)
	l.tp = newProvider(l.b)
	return l
}

func (l *Live) dropped(runID, reason string, n int) {
	l.mu.Lock()
	_, known := l.lost[runID]
	if known || len(l.lost) < maxLost {
		l.lost[runID] += int64(n)
	}
	l.mu.Unlock()
	if !known { // once per run, not per span
		l.o.Logger.Warn("otel export lost spans of a run; export it again from its log", "run", runID, "reason", reason,
			"command", "agentplane trace export "+runID)
	}
	if l.o.OnDrop != nil {
		l.o.OnDrop(reason, n)
	}
}

// Lost returns the runs that lost spans, sorted (at most 1000 are kept).
func (l *Live) Lost() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.lost))
	for id := range l.lost {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Stats returns the batcher's counts.
func (l *Live) Stats() Stats { return l.b.Stats() }

// Flush sends every span ended so far and waits for it (or ctx).
func (l *Live) Flush(ctx context.Context) error { return l.b.ForceFlush(ctx) }

// Shutdown sends what is queued, bounded by ctx, and closes the exporter.
func (l *Live) Shutdown(ctx context.Context) error { return l.tp.Shutdown(ctx) }

// Run follows one run (tail.Sink).
func (l *Live) Run(runID string) tail.RunSink { return &liveRun{l: l, runID: runID} }

type liveRun struct {
	l      *Live
	runID  string
	d      *deriver
	broken bool
}

func (r *liveRun) Event(ev *store.Event, live bool) {
	if r.broken {
		return
	}
	if r.d == nil {
		r.d = newDeriver(context.Background(), r.l.tp, r.runID, r.l.o.Provider)
	}
	if err := r.d.feed(ev, live); err != nil {
		// A log the deriver cannot read is left to trace verify; its
		// remaining spans are not guessed at.
		r.broken = true
		r.l.o.Logger.Warn("otel export: cannot derive spans from this log", "run", r.runID, "seq", ev.Seq, "err", err)
	}
}

// Close drops the run's state; a run span never ended is not sent.
func (r *liveRun) Close() { r.d = nil }
