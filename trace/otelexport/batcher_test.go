package otelexport_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentplane/agentplane/trace/otelexport"
)

// stuck blocks every export until released, then fails or succeeds.
type stuck struct {
	release chan struct{}
	fail    bool
	calls   atomic.Int64
	spans   atomic.Int64
}

func (s *stuck) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	s.calls.Add(1)
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.fail {
		return errors.New("collector said 500")
	}
	s.spans.Add(int64(len(spans)))
	return nil
}

func (s *stuck) Shutdown(context.Context) error { return nil }

func span(run string) sdktrace.ReadOnlySpan {
	return tracetest.SpanStub{Name: "s", Attributes: []attribute.KeyValue{attribute.String("gen_ai.conversation.id", run)}}.Snapshot()
}

// OnEnd never waits: with the exporter stuck, spans past the queue are
// dropped and counted per run at once, and what was queued is sent in
// batches when the exporter comes back.
func TestBatcherDropsRatherThanWaits(t *testing.T) {
	exp := &stuck{release: make(chan struct{})}
	drops := map[string]int{}
	b := otelexport.NewBatcher(exp, otelexport.BatcherOptions{QueueSize: 4, BatchSize: 2, Interval: time.Hour, Timeout: time.Minute,
		OnDrop: func(run, reason string, n int) { drops[run+"/"+reason] += n }})
	b.OnEnd(span("a"))
	b.OnEnd(span("a")) // a full batch: the loop takes both and is stuck sending
	for exp.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	for range 10 {
		b.OnEnd(span("b")) // 4 queue, 6 drop; none of these calls waits
	}
	if st := b.Stats(); st.Dropped != 6 || drops["b/queue_full"] != 6 {
		t.Fatalf("stats %+v, drops %v; want 6 dropped for run b", st, drops)
	}
	close(exp.release)
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Exported != 6 || exp.spans.Load() != 6 || exp.calls.Load() != 3 {
		t.Fatalf("stats %+v, exporter got %d spans in %d calls; want 6 in 3", st, exp.spans.Load(), exp.calls.Load())
	}
}

// A batch the exporter refuses is counted as failed, per run.
func TestBatcherCountsFailedBatches(t *testing.T) {
	exp := &stuck{release: make(chan struct{}), fail: true}
	close(exp.release)
	var failed []string
	b := otelexport.NewBatcher(exp, otelexport.BatcherOptions{BatchSize: 3, Interval: time.Hour,
		OnDrop: func(run, reason string, n int) { failed = append(failed, run+"/"+reason) }})
	for _, r := range []string{"a", "a", "b"} {
		b.OnEnd(span(r))
	}
	if err := b.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Failed != 3 || st.Exported != 0 || len(failed) != 2 {
		t.Fatalf("stats %+v, drops %v", st, failed)
	}
	_ = b.Shutdown(context.Background())
}

// Shutdown is bounded by its context even with a full queue and an
// exporter that never answers: what is left is counted as failed.
func TestBatcherShutdownIsBounded(t *testing.T) {
	exp := &stuck{release: make(chan struct{})}
	defer close(exp.release)
	b := otelexport.NewBatcher(exp, otelexport.BatcherOptions{QueueSize: 100, BatchSize: 10, Interval: time.Hour, Timeout: time.Hour})
	for range 100 {
		b.OnEnd(span("a"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() { _ = b.Shutdown(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown waited for an exporter that never answers")
	}
	if st := b.Stats(); st.Exported != 0 || st.Failed+st.Dropped != 100 {
		t.Fatalf("stats %+v, want all 100 spans failed", st)
	}
}
