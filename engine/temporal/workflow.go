package temporal

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// Names of the workflow and of its signals on Temporal.
const (
	// WorkflowName is the Temporal workflow type of an agentplane run.
	WorkflowName = "agentplane.run"
	// SignalName carries an approval, a message or a cancel (sigMsg).
	SignalName = "agentplane.signal"
	// WakeName carries the engine clock's time to a waiting run (wakeMsg),
	// so a wait's deadline passes on that clock too.
	WakeName = "agentplane.wake"
)

// runInput is the workflow's input: the run as created and, in a run
// continued as new, where agentplane's log stood.
type runInput struct {
	Run    engine.RunInfo `json:"run"`
	Resume *resume        `json:"resume,omitempty"`
}

// resume is the compact state a run continued as new carries: the
// sequence number and hash of the newest event of agentplane's log. The
// new run re-runs the loop over the log up to there, as the embedded
// engine resumes a run, and goes live after it.
type resume struct {
	Seq  int64  `json:"seq"`
	Head string `json:"head"`
	// Taken are the stored signals the first run read at its start
	// (pendingAtStart): one delivered again later is dropped.
	Taken []int64 `json:"taken,omitempty"`
}

// Change ids of the workflow's commands (workflow.GetVersion): a history
// recorded before a change replays along the path it took.
const (
	// changePendingAtStart: a run's first workflow task reads the signals
	// stored for the run before its workflow started (a local activity).
	changePendingAtStart = "pending-signals-at-start"
)

// continueAsNew unwinds the loop at a step boundary when the history has
// grown to the engine's ContinueAsNewPolicy.
type continueAsNew struct{}

func (*continueAsNew) Error() string { return "the run continues as new" }

// sigMsg is a signal as the workflow receives it: the stored signal's id
// (consumed by the append that records it), its kind and payload.
type sigMsg struct {
	ID      int64           `json:"id"`
	Kind    string          `json:"kind"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// wakeMsg tells a waiting run what time the engine's clock reads.
type wakeMsg struct {
	Now time.Time `json:"now"`
}

// run is the Temporal workflow: the engine's Workflow over a tenv, then
// the final update of the run's row.
func (e *Engine) run(ctx workflow.Context, in runInput) (engine.Outcome, error) {
	en := &tenv{
		ctx: ctx, e: e, info: in.Run, now: in.Run.CreatedAt, status: store.StatusRunning,
		sigs:  workflow.GetSignalChannel(ctx, SignalName),
		wakes: workflow.GetSignalChannel(ctx, WakeName),
	}
	if in.Resume != nil {
		if err := en.resume(*in.Resume); err != nil {
			return engine.Outcome{}, err
		}
	} else if workflow.GetVersion(ctx, changePendingAtStart, workflow.DefaultVersion, 1) == 1 {
		if err := en.pendingAtStart(); err != nil {
			return engine.Outcome{}, err
		}
	}
	out, err := e.o.Workflow(context.Background(), en)
	var cn *continueAsNew
	if errors.As(err, &cn) {
		return engine.Outcome{}, workflow.NewContinueAsNewError(ctx, WorkflowName,
			runInput{Run: in.Run, Resume: &resume{Seq: en.appended, Head: hex.EncodeToString(en.head[:]), Taken: en.takenIDs()}})
	}
	if err != nil {
		out = engine.Outcome{Status: store.StatusFailed, Result: "platform error: " + err.Error()}
	}
	var noWake time.Time
	en.update = &store.RunUpdate{Status: &out.Status, Result: &out.Result, WakeAt: &noWake}
	ferr := en.flush(time.Time{})
	if ferr != nil && err != nil {
		// What was pending may be why the run failed (a refused signal):
		// the row still says how the run ended.
		en.pending, en.consume, en.consumeAt, en.seq = nil, nil, nil, en.appended
		ferr = en.flush(time.Time{})
	}
	if ferr != nil {
		// The run's row could not say how it ended: the workflow fails,
		// and the engine's reconciliation marks the row.
		return out, fmt.Errorf("record the end of run %s: %w", in.Run.ID, errors.Join(err, ferr))
	}
	return out, nil
}

// tenv is engine.Env over a workflow.Context. Records of no effect are
// buffered and appended with the next activity (as the embedded engine
// commits buffered appends with the next commit); durable records,
// activity results and signals are appended by activities, each before the
// workflow goes on.
type tenv struct {
	ctx  workflow.Context
	e    *Engine
	info engine.RunInfo
	// seq, head: the newest event the workflow knows of (appended or
	// pending); appended is the newest the log holds.
	seq      int64
	appended int64
	head     [32]byte
	now      time.Time
	pending  []newEvent
	consume  []int64
	// consumeAt[i] is the index in pending of the event recording consume[i].
	consumeAt []int
	status    string
	wakeAt    *time.Time
	update    *store.RunUpdate
	counters  *engine.Counters
	sigs      workflow.ReceiveChannel
	wakes     workflow.ReceiveChannel
	// early are the signals stored before the workflow started, taken
	// before any from sigs; taken their ids, so that the same signal
	// delivered on sigs as well is dropped.
	early []sigMsg
	taken map[int64]bool
	// recorded is the log a run continued as new re-runs the loop over;
	// cursor is the next event to consume. Past it, the workflow is live.
	recorded []engine.Event
	cursor   int
}

// resume reads agentplane's log up to r (immutable: the log is append-only
// and the chain's head is checked against r) for the loop to re-run over.
// It is read from the workflow itself: every replay reads the same bytes,
// and the history holds none of them.
func (t *tenv) resume(r resume) error {
	ctx := context.Background()
	evs, err := t.e.o.Store.Events(ctx, t.info.ID, 0, int(r.Seq))
	if err != nil {
		return fmt.Errorf("resume run %s: read its log: %w", t.info.ID, err)
	}
	if int64(len(evs)) != r.Seq || r.Seq == 0 || hex.EncodeToString(evs[len(evs)-1].Hash[:]) != r.Head {
		return fmt.Errorf("resume run %s: its log does not end at seq %d with the carried head", t.info.ID, r.Seq)
	}
	if err := trace.CheckLog(ctx, t.e.o.Store.Blobs(t.info.Tenant), evs); err != nil {
		return fmt.Errorf("resume run %s: %w", t.info.ID, err)
	}
	t.recorded = make([]engine.Event, len(evs))
	for i, ev := range evs {
		t.recorded[i] = engine.Event{Seq: ev.Seq, Type: ev.Type, Step: ev.Step, At: ev.At, Payload: ev.Payload}
	}
	t.seq, t.appended, t.status = r.Seq, r.Seq, ""
	if len(r.Taken) > 0 {
		t.taken = make(map[int64]bool, len(r.Taken))
		for _, id := range r.Taken {
			t.taken[id] = true
		}
	}
	t.head, err = decodeHash(r.Head)
	return err
}

// replayed returns the recorded event at the cursor if it is typ at step;
// ok is false past the end of the recorded log.
func (t *tenv) replayed(typ string, step int) (engine.Event, bool, error) {
	if t.cursor >= len(t.recorded) {
		return engine.Event{}, false, nil
	}
	ev := t.recorded[t.cursor]
	if ev.Type != typ || ev.Step != step {
		return engine.Event{}, false, fmt.Errorf("%w: run %s seq %d recorded %s (step %d), code asked for %s (step %d)",
			engine.ErrNondeterminism, t.info.ID, ev.Seq, ev.Type, ev.Step, typ, step)
	}
	t.cursor++
	t.now = ev.At
	return ev, true, nil
}

// replayedSignals consumes the signal events at the cursor; live is false
// while the recorded log is not all consumed.
func (t *tenv) replayedSignals() (evs []engine.Event, live bool) {
	if t.cursor >= len(t.recorded) {
		return nil, true
	}
	for t.cursor < len(t.recorded) && t.recorded[t.cursor].Type == "signal" {
		evs = append(evs, t.recorded[t.cursor])
		t.now = t.recorded[t.cursor].At
		t.cursor++
	}
	return evs, false
}

var _ engine.Env = (*tenv)(nil)

func (t *tenv) Run() engine.RunInfo      { return t.info }
func (t *tenv) Now() time.Time           { return t.now }
func (t *tenv) Report(c engine.Counters) { t.counters = &c }

func (t *tenv) Record(_ context.Context, typ string, step int, d engine.Durability, payload any) (engine.Event, error) {
	if ev, ok, err := t.replayed(typ, step); ok || err != nil {
		return ev, err
	}
	b, err := engine.EncodePayload(payload)
	if err != nil {
		return engine.Event{}, fmt.Errorf("record %s: %w", typ, err)
	}
	t.seq++
	ev := engine.Event{Seq: t.seq, Type: typ, Step: step, Payload: b}
	if d == engine.Buffered {
		ev.At = t.now
		t.pending = append(t.pending, newEvent{Type: typ, Step: step, Payload: b, At: t.now})
		return ev, nil
	}
	t.pending = append(t.pending, newEvent{Type: typ, Step: step, Payload: b})
	if err := t.flush(time.Time{}); err != nil {
		return engine.Event{}, err
	}
	ev.At = t.now
	return ev, nil
}

func (t *tenv) Execute(_ context.Context, c engine.Call) (engine.Event, error) {
	if ev, ok, err := t.replayed(c.Event, c.Step); ok || err != nil {
		return ev, err
	}
	if _, ok := t.e.o.Activities.Lookup(c.Activity); !ok {
		return engine.Event{}, fmt.Errorf("activity %q is not registered with the engine", c.Activity)
	}
	input, err := json.Marshal(c.Input)
	if err != nil {
		return engine.Event{}, fmt.Errorf("activity %s (step %d): encode input: %w", c.Activity, c.Step, err)
	}
	t.seq++
	t.pending = append(t.pending, newEvent{Type: c.Event, Step: c.Step})
	in := executeIn{Record: t.appendIn(time.Time{}), Step: c.Step, Input: input}
	var out appended
	if err := t.call(c.Activity, in.Record, input, in, &out); err != nil {
		return engine.Event{}, fmt.Errorf("activity %s (step %d): %w", c.Activity, c.Step, classify(err))
	}
	if err := t.appendedOK(in.Record, out); err != nil {
		return engine.Event{}, err
	}
	return engine.Event{Seq: t.seq, Type: c.Event, Step: c.Step, At: t.now, Payload: out.Payload}, nil
}

// classify gives an activity failure, as the workflow sees it, its
// engine error class.
func classify(err error) error {
	if IsNonRetryable(err) {
		return engine.NonRetryable(err)
	}
	return engine.Retryable(err)
}

// appendIn takes the pending events, signals and row updates into one
// append after the newest appended event.
func (t *tenv) appendIn(floor time.Time) appendIn {
	in := appendIn{RunID: t.info.ID, Tenant: t.info.Tenant, PrevSeq: t.appended, PrevHash: hex.EncodeToString(t.head[:]),
		Events: t.pending, Floor: floor, Consume: t.consume, ConsumeAt: t.consumeAt, Update: t.update}
	if in.Update == nil && (t.status != "" || t.wakeAt != nil || t.counters != nil) {
		in.Update = &store.RunUpdate{}
	}
	if in.Update != nil {
		if t.status != "" && in.Update.Status == nil {
			in.Update.Status = &t.status
		}
		if t.wakeAt != nil && in.Update.WakeAt == nil {
			in.Update.WakeAt = t.wakeAt
		}
		if c := t.counters; c != nil {
			in.Update.Steps, in.Update.InputTokens, in.Update.OutputTokens = &c.Steps, &c.InputTokens, &c.OutputTokens
			in.Update.CostMicros, in.Update.Currency, in.Update.CostUnknown = &c.CostMicros, &c.Currency, &c.CostUnknown
		}
	}
	return in
}

// appendedOK takes in as appended: the chain's head and the clock move on,
// and nothing is pending.
func (t *tenv) appendedOK(in appendIn, out appended) error {
	if len(out.At) != len(in.Events) {
		return fmt.Errorf("append to run %s: %d times for %d events", t.info.ID, len(out.At), len(in.Events))
	}
	head, err := decodeHash(out.Head)
	if err != nil {
		return err
	}
	t.head, t.appended = head, in.PrevSeq+int64(len(in.Events))
	if n := len(out.At); n > 0 {
		t.now = out.At[n-1]
	}
	t.pending, t.consume, t.consumeAt, t.status, t.wakeAt, t.update, t.counters = nil, nil, nil, "", nil, nil, nil
	return nil
}

// flush appends what is pending (events, signals, the row's update), if
// anything is.
func (t *tenv) flush(floor time.Time) error {
	if len(t.pending) == 0 && len(t.consume) == 0 && t.status == "" && t.wakeAt == nil && t.update == nil && t.counters == nil {
		return nil
	}
	in := t.appendIn(floor)
	var out appended
	if err := t.call(ActivityAppend, in, nil, in, &out); err != nil {
		return fmt.Errorf("append to run %s: %w", t.info.ID, classify(err))
	}
	return t.appendedOK(in, out)
}

// call runs the Temporal activity name on arg. Its activity id names what
// it appends (the sequence number of its last event, its type and a digest
// of the chain's head, the events and the input), so a workflow whose code
// now appends something else than its history recorded is refused by
// Temporal's replay as nondeterministic, before any effect.
func (t *tenv) call(name string, rec appendIn, input []byte, arg, out any) error {
	p := t.e.policy(name)
	opts, err := p.Options("")
	if err != nil {
		return err
	}
	opts.ActivityID = activityID(rec, name, input)
	f := workflow.ExecuteActivity(workflow.WithActivityOptions(t.ctx, opts), name, arg)
	return f.Get(t.ctx, out)
}

func activityID(rec appendIn, name string, input []byte) string {
	h := sha256.New()
	var n [8]byte
	field := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field([]byte(rec.PrevHash))
	field([]byte(name))
	field(input)
	last := ""
	for _, ev := range rec.Events {
		field([]byte(ev.Type))
		binary.BigEndian.PutUint64(n[:], uint64(ev.Step))
		h.Write(n[:])
		field(ev.Payload)
		field([]byte(ev.At.UTC().Format(time.RFC3339Nano)))
		last = ev.Type
	}
	return fmt.Sprintf("%d-%s-%s", rec.PrevSeq+int64(len(rec.Events)), last, hex.EncodeToString(h.Sum(nil)[:8]))
}

// pendingAtStart takes, in a new run's first workflow task, the signals
// stored for the run before its workflow started (a signal sent while its
// Start had created the row but not yet the workflow, or after a Start
// that crashed in between, found no workflow to deliver to and stayed
// pending). They are taken before any delivered on the channel; a signal
// both read here and delivered there is taken once.
func (t *tenv) pendingAtStart() error {
	ctx := workflow.WithLocalActivityOptions(t.ctx, workflow.LocalActivityOptions{ScheduleToCloseTimeout: time.Minute})
	var msgs []sigMsg
	if err := workflow.ExecuteLocalActivity(ctx, t.e.host.pendingActivity, t.info.ID).Get(t.ctx, &msgs); err != nil {
		return fmt.Errorf("read the signals stored for run %s: %w", t.info.ID, err)
	}
	if len(msgs) == 0 {
		return nil
	}
	t.early, t.taken = msgs, make(map[int64]bool, len(msgs))
	for _, m := range msgs {
		t.taken[m.ID] = true
	}
	return nil
}

// takenIDs lists the ids pendingAtStart took, in order (a continued run
// carries them).
func (t *tenv) takenIDs() []int64 {
	ids := make([]int64, 0, len(t.taken))
	for id := range t.taken {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// fresh reports whether m is not a signal pendingAtStart already took.
func (t *tenv) fresh(m sigMsg) bool { return !t.taken[m.ID] }

// drain takes the signals that arrived, without waiting.
func (t *tenv) drain() []sigMsg {
	out := t.early
	t.early = nil
	for {
		var m sigMsg
		if !t.sigs.ReceiveAsync(&m) {
			return out
		}
		if t.fresh(m) {
			out = append(out, m)
		}
	}
}

// recordSignals appends msgs as signal events (consuming their stored
// signals in the same transaction) and returns the events.
func (t *tenv) recordSignals(msgs []sigMsg, step int) ([]engine.Event, error) {
	first := t.seq + 1
	for _, m := range msgs {
		t.seq++
		t.consumeAt = append(t.consumeAt, len(t.pending))
		t.pending = append(t.pending, newEvent{Type: "signal", Step: step, Payload: engine.SignalEventPayload(m.Kind, m.Payload)})
		t.consume = append(t.consume, m.ID)
	}
	if err := t.flush(time.Time{}); err != nil {
		return nil, err
	}
	out := make([]engine.Event, len(msgs))
	for i, m := range msgs {
		out[i] = engine.Event{Seq: first + int64(i), Type: "signal", Step: step, At: t.now, Payload: engine.SignalEventPayload(m.Kind, m.Payload)}
	}
	return out, nil
}

// Signals is the loop's step boundary: besides taking the signals that
// arrived, it is where a run whose history has grown to the engine's
// ContinueAsNewPolicy continues as new.
func (t *tenv) Signals(_ context.Context, step int) ([]engine.Event, error) {
	if evs, live := t.replayedSignals(); !live {
		return evs, nil
	}
	msgs := t.drain()
	if len(msgs) > 0 {
		return t.recordSignals(msgs, step)
	}
	if t.e.can.Due(t.ctx) {
		if err := t.flush(time.Time{}); err != nil {
			return nil, err
		}
		return nil, &continueAsNew{}
	}
	return nil, nil
}

func (t *tenv) Await(_ context.Context, step int, deadline time.Time) ([]engine.Event, error) {
	if evs, live := t.replayedSignals(); !live {
		return evs, nil
	}
	if msgs := t.drain(); len(msgs) > 0 {
		return t.recordSignals(msgs, step)
	}
	// The run's row says it waits, and until when, before it blocks.
	wake := deadline
	t.status, t.wakeAt = store.StatusWaiting, &wake
	if err := t.flush(time.Time{}); err != nil {
		return nil, err
	}
	tctx, cancelTimer := workflow.WithCancel(t.ctx)
	defer cancelTimer()
	var got []sigMsg
	fired := false
	sel := workflow.NewSelector(t.ctx)
	sel.AddReceive(t.sigs, func(c workflow.ReceiveChannel, _ bool) {
		var m sigMsg
		c.Receive(t.ctx, &m)
		if t.fresh(m) {
			got = append(got, m)
		}
	})
	sel.AddReceive(t.wakes, func(c workflow.ReceiveChannel, _ bool) {
		var w wakeMsg
		c.Receive(t.ctx, &w)
		if !deadline.IsZero() && !w.Now.Before(deadline) {
			fired = true
		}
	})
	if !deadline.IsZero() {
		// The deadline is on the engine's clock, as the log's times are:
		// the timer runs from the newest event's time.
		if d := deadline.Sub(t.now); d > 0 {
			sel.AddFuture(workflow.NewTimer(tctx, d), func(f workflow.Future) {
				if f.Get(t.ctx, nil) == nil {
					fired = true
				}
			})
		} else {
			fired = true
		}
	}
	for len(got) == 0 && !fired {
		sel.Select(t.ctx)
	}
	var noWake time.Time
	t.status, t.wakeAt = store.StatusRunning, &noWake
	if len(got) > 0 {
		return t.recordSignals(append(got, t.drain()...), step)
	}
	// The timer fired: it is recorded like any other input, no earlier
	// than the deadline.
	t.seq++
	payload := engine.TimerEventPayload(deadline)
	t.pending = append(t.pending, newEvent{Type: "signal", Step: step, Payload: payload})
	if err := t.flush(deadline); err != nil {
		return nil, err
	}
	return []engine.Event{{Seq: t.seq, Type: "signal", Step: step, At: t.now, Payload: payload}}, nil
}

// Reads of immutable content, addressed by hash or by a run that ended,
// are made from the workflow itself: they return the same bytes on every
// replay, so they need no place in the history.

func (t *tenv) Blob(ctx context.Context, sum [32]byte) ([]byte, error) {
	return t.e.o.Store.Blobs(t.info.Tenant).GetBlob(ctx, sum)
}

func (t *tenv) BlobSize(ctx context.Context, sum [32]byte) (int64, error) {
	return t.e.o.Store.Blobs(t.info.Tenant).BlobSize(ctx, sum)
}

func (t *tenv) Manifest(ctx context.Context, sum [32]byte) ([]byte, error) {
	return engine.ReadManifest(ctx, t.e.o.Store, sum)
}

func (t *tenv) RunLog(ctx context.Context, runID string) ([]engine.Event, error) {
	return engine.ReadRunLog(ctx, t.e.o.Store, runID)
}
