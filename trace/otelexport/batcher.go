package otelexport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// BatcherOptions configure NewBatcher. Zero fields take the defaults.
type BatcherOptions struct {
	// QueueSize bounds the spans waiting to be sent (default 4096). A span
	// ended while the queue is full is dropped and counted, never waited
	// for: a collector that is down or slow never holds up a run.
	QueueSize int
	// BatchSize is the most spans sent in one request (default 512).
	BatchSize int
	// Interval is the longest a span waits for its batch to fill (default 1s).
	Interval time.Duration
	// Timeout bounds one export request, its retries included (default 10s).
	Timeout time.Duration
	Logger  *slog.Logger
	// OnDrop, when set, is told of every span that did not reach the
	// exporter (reason "queue_full" or "export_failed") with the run it
	// belongs to, so the run can be exported again from its log.
	OnDrop func(runID, reason string, n int)
}

// Stats counts what a Batcher did with the spans it was given.
type Stats struct {
	Exported int64 // accepted by the exporter
	Dropped  int64 // dropped because the queue was full
	Failed   int64 // in a batch the exporter refused or timed out on
}

// Batcher is a span processor that sends ended spans to an exporter in
// batches from a bounded queue, in its own goroutine. OnEnd never blocks.
// It is safe for concurrent use; Shutdown is idempotent.
type Batcher struct {
	o     BatcherOptions
	exp   sdktrace.SpanExporter
	queue chan sdktrace.ReadOnlySpan
	flush chan chan struct{}
	done  chan struct{}
	stop  sync.Once
	// closed makes OnEnd after Shutdown drop instead of sending on a
	// channel nobody reads.
	closed atomic.Bool
	// base is cancelled when Shutdown's context ends, so what is still
	// queued then fails at once instead of holding up an exit.
	base       context.Context
	cancelBase context.CancelFunc

	exported, dropped, failed atomic.Int64
}

// NewBatcher starts a batcher in front of exp.
func NewBatcher(exp sdktrace.SpanExporter, o BatcherOptions) *Batcher {
	if o.QueueSize <= 0 {
		o.QueueSize = 4096
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 512
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	b := &Batcher{o: o, exp: exp, queue: make(chan sdktrace.ReadOnlySpan, o.QueueSize),
		flush: make(chan chan struct{}), done: make(chan struct{})}
	b.base, b.cancelBase = context.WithCancel(context.Background())
	go b.loop()
	return b
}

// OnStart does nothing: spans are sent when they end.
func (b *Batcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues s, or drops and counts it when the queue is full.
func (b *Batcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if !b.closed.Load() {
		select {
		case b.queue <- s:
			return
		default:
		}
	}
	b.dropped.Add(1)
	b.drop([]sdktrace.ReadOnlySpan{s}, "queue_full")
}

// runIDOf reads the run a span belongs to from its attributes.
func runIDOf(s sdktrace.ReadOnlySpan) string {
	for _, a := range s.Attributes() {
		if a.Key == "gen_ai.conversation.id" {
			return a.Value.AsString()
		}
	}
	return ""
}

func (b *Batcher) drop(spans []sdktrace.ReadOnlySpan, reason string) {
	if b.o.OnDrop == nil {
		return
	}
	per := map[string]int{}
	for _, s := range spans {
		per[runIDOf(s)]++
	}
	for run, n := range per {
		b.o.OnDrop(run, reason, n)
	}
}

// ForceFlush sends every span queued before the call and waits for it
// (or for ctx).
func (b *Batcher) ForceFlush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case b.flush <- ack:
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown sends what is queued, stops the goroutine and shuts the
// exporter down, all bounded by ctx: once ctx ends, whatever is still
// queued is counted as failed rather than sent.
func (b *Batcher) Shutdown(ctx context.Context) error {
	var err error
	b.stop.Do(func() {
		stop := context.AfterFunc(ctx, b.cancelBase)
		defer stop()
		defer b.cancelBase()
		ferr := b.ForceFlush(ctx)
		b.closed.Store(true)
		close(b.flush)
		<-b.done
		err = errors.Join(ferr, b.exp.Shutdown(ctx))
	})
	return err
}

// Stats returns the counts so far.
func (b *Batcher) Stats() Stats {
	return Stats{Exported: b.exported.Load(), Dropped: b.dropped.Load(), Failed: b.failed.Load()}
}

func (b *Batcher) loop() {
	defer close(b.done)
	batch := make([]sdktrace.ReadOnlySpan, 0, b.o.BatchSize)
	tick := time.NewTicker(b.o.Interval)
	defer tick.Stop()
	send := func() {
		if len(batch) > 0 {
			b.send(batch)
			batch = batch[:0]
		}
	}
	for {
		select {
		case s := <-b.queue:
			batch = append(batch, s)
			if len(batch) == b.o.BatchSize {
				send()
			}
		case <-tick.C:
			send()
		case ack, ok := <-b.flush:
			for drained := false; !drained; {
				select {
				case s := <-b.queue:
					batch = append(batch, s)
					if len(batch) == b.o.BatchSize {
						send()
					}
				default:
					drained = true
				}
			}
			send()
			if !ok {
				return
			}
			close(ack)
		}
	}
}

func (b *Batcher) send(batch []sdktrace.ReadOnlySpan) {
	ctx, cancel := context.WithTimeout(b.base, b.o.Timeout)
	defer cancel()
	if err := b.exp.ExportSpans(ctx, batch); err != nil {
		b.failed.Add(int64(len(batch)))
		b.o.Logger.Warn("otel export failed; the spans can be sent again from the log (agentplane trace export)",
			"spans", len(batch), "err", err)
		b.drop(batch, "export_failed")
		return
	}
	b.exported.Add(int64(len(batch)))
}

// ExportBatches sends spans through exp in batches of size (512 when size
// is not positive), each bounded by timeout, and returns how many were
// accepted and how many failed, with the first error.
func ExportBatches(ctx context.Context, exp sdktrace.SpanExporter, spans []sdktrace.ReadOnlySpan, size int, timeout time.Duration) (sent, failed int, err error) {
	if size <= 0 {
		size = 512
	}
	for i := 0; i < len(spans); i += size {
		batch := spans[i:min(i+size, len(spans))]
		bctx, cancel := context.WithTimeout(ctx, timeout)
		e := exp.ExportSpans(bctx, batch)
		cancel()
		if e != nil {
			failed += len(batch)
			if err == nil {
				err = fmt.Errorf("export %d spans: %w", len(batch), e)
			}
			continue
		}
		sent += len(batch)
	}
	return sent, failed, err
}
