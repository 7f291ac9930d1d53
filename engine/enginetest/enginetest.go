// Package enginetest is the conformance suite every durable-execution
// engine passes: Exercise(t, newEngine) drives a small test workflow (steps
// of at-least-once activities, signals, timers, cancel) on the engine and
// checks, from agentplane's event log and from what the activities saw,
// that crashes at every activity boundary repeat no effect, activities
// carry the idempotency key run_id:step:index, signals arrive exactly once
// and in order, timers fire on the engine's clock (a 24-hour approval
// expiry on a fake one), cancel takes effect at the next step boundary,
// changed workflow code is detected, verify never goes live, a waiting run
// holds no goroutine or worker slot, and retryable errors are retried while
// non-retryable ones are not.
package enginetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/sqlite"
)

// Config is what the suite gives an engine: agentplane's store (the event
// log, blobs and pending signals live there on every engine), the clock
// the engine must read time from, and the workflow with its activities.
type Config struct {
	Store      store.Store
	Clock      func() time.Time
	Workflow   engine.Workflow
	Activities *engine.Activities
	// Retry is the retry policy the engine applies to retryable activity
	// errors (the suite counts attempts against MaxAttempts).
	Retry engine.RetryPolicy
	// LeaseTTL bounds how long a crashed worker holds a run; the suite
	// advances the clock past it before resuming.
	LeaseTTL time.Duration
}

// Engine is what the suite drives. Runs are created by the suite in the
// store as queued (store.CreateRun) and started with Start.
type Engine interface {
	// Start makes a queued run run.
	Start(ctx context.Context, runID string) error
	// Signal delivers a signal to a run.
	Signal(ctx context.Context, runID, kind string, payload []byte) error
	// Work runs workers until no run can make progress now (every run
	// ended, or waits for a signal or a timer not yet due), or until ctx
	// ends. Concurrency is the number of worker slots. A run that fails is
	// that run's outcome, not an error of Work.
	Work(ctx context.Context, concurrency int) error
	// Verify re-runs a run's workflow over its log without any activity.
	Verify(ctx context.Context, runID string) (engine.Outcome, int, error)
}

// NewEngine builds an engine for one subtest.
type NewEngine func(t *testing.T, c Config) Engine

// Clock is a fake clock, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// Now returns the fake time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// Advance moves the fake time forward.
func (c *Clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// EffectIn is the input of the suite's effect activity.
type EffectIn struct {
	Key   string `json:"key"`
	Step  int    `json:"step"`
	Value int    `json:"value"`
}

// EffectOut is its recorded result.
type EffectOut struct {
	Value int `json:"value"`
}

// world is what the suite's activities act on: effects applied once per
// idempotency key, every invocation counted, failures and crashes injected.
type world struct {
	mu          sync.Mutex
	applied     map[string]int // key -> times the effect was applied
	invocations map[string]int // key -> times the activity ran
	attempts    map[string][]int
	// crash, when set, is called inside the activity for key crashKey,
	// before (crashAfter false) or after the effect.
	crash      func()
	crashKey   string
	crashAfter bool
	// fail makes the activity for key failKey fail failTimes times.
	failKey       string
	failTimes     int
	failRetryable bool
	// onStep runs inside the activity of a step (to send signals mid-step).
	onStep func(step int)
}

func newWorld() *world {
	return &world{applied: map[string]int{}, invocations: map[string]int{}, attempts: map[string][]int{}}
}

func (w *world) effect(ctx context.Context, in EffectIn) (EffectOut, error) {
	attempt := 0
	if ai, ok := engine.ActivityInfoFrom(ctx); ok {
		attempt = ai.Attempt
	}
	w.mu.Lock()
	w.invocations[in.Key]++
	w.attempts[in.Key] = append(w.attempts[in.Key], attempt)
	crash := w.crash != nil && w.crashKey == in.Key
	if crash {
		w.crash, w.crashKey = nil, "" // the process dies once
	}
	crashAfter := w.crashAfter
	fail := in.Key == w.failKey && w.failTimes > 0
	if fail {
		w.failTimes--
	}
	retryable, onStep := w.failRetryable, w.onStep
	w.mu.Unlock()
	if crash && !crashAfter {
		w.crashNow(ctx)
		return EffectOut{}, ctx.Err()
	}
	if fail {
		err := fmt.Errorf("injected failure of %s", in.Key)
		if retryable {
			return EffectOut{}, engine.Retryable(err)
		}
		return EffectOut{}, engine.NonRetryable(err)
	}
	w.mu.Lock()
	w.applied[in.Key]++ // an idempotent service: a key seen again changes nothing ...
	w.mu.Unlock()
	if onStep != nil {
		onStep(in.Step)
	}
	if crash {
		// ... and the process dies after the effect, before its result is
		// recorded: the engine must run the activity again, with the same key.
		w.crashNow(ctx)
		return EffectOut{}, ctx.Err()
	}
	return EffectOut{Value: in.Value * 10}, nil
}

// crashNow kills the worker running ctx and waits until ctx says so.
func (w *world) crashNow(ctx context.Context) {
	if k, ok := ctx.Value(killKey{}).(func()); ok {
		k()
	}
	<-ctx.Done()
}

type killKey struct{}

func (w *world) activities(t *testing.T) *engine.Activities {
	acts, err := engine.NewActivities(engine.NewActivity("enginetest.effect", w.effect))
	if err != nil {
		t.Fatal(err)
	}
	return acts
}

// stepsWorkflow runs n steps; each step first takes the pending signals
// (a cancel ends the run there) and then runs one effect.
func stepsWorkflow(n int) engine.Workflow {
	return func(ctx context.Context, env engine.Env) (engine.Outcome, error) {
		run := env.Run()
		sum := 0
		for step := 1; step <= n; step++ {
			sigs, err := env.Signals(ctx, step)
			if err != nil {
				return engine.Outcome{}, err
			}
			for _, s := range sigs {
				if signalKind(s) == "cancel" {
					if _, err := env.Record(ctx, "ended", step, engine.Durable, "cancelled"); err != nil {
						return engine.Outcome{}, err
					}
					return engine.Outcome{Status: store.StatusCancelled, Result: fmt.Sprintf("cancelled at step %d", step)}, nil
				}
			}
			ev, err := env.Execute(ctx, engine.Call{Activity: "enginetest.effect", Event: "effect", Step: step, Durability: engine.Durable,
				Input: EffectIn{Key: engine.IdempotencyKey(run.ID, step, 0), Step: step, Value: step}})
			if err != nil {
				return engine.Outcome{}, err
			}
			var out EffectOut
			if err := json.Unmarshal(ev.Payload, &out); err != nil {
				return engine.Outcome{}, err
			}
			sum += out.Value
			env.Report(engine.Counters{Steps: step})
		}
		if _, err := env.Record(ctx, "ended", n, engine.Durable, sum); err != nil {
			return engine.Outcome{}, err
		}
		return engine.Outcome{Status: store.StatusCompleted, Result: fmt.Sprint(sum)}, nil
	}
}

// signalKind reads the kind of a recorded signal event.
func signalKind(ev engine.Event) string {
	var s struct {
		Kind string `json:"kind"`
	}
	_ = json.Unmarshal(ev.Payload, &s)
	return s.Kind
}

func signalText(ev engine.Event) string {
	var s struct {
		Payload struct {
			Text string `json:"text"`
		} `json:"payload"`
	}
	_ = json.Unmarshal(ev.Payload, &s)
	return s.Payload.Text
}

// harness is one subtest's store, clock, world and engine.
type harness struct {
	t     *testing.T
	ctx   context.Context
	st    *sqlite.Store
	clock *Clock
	w     *world
	eng   Engine
	cfg   Config
}

const ttl = 10 * time.Second

func newHarness(t *testing.T, newEngine NewEngine, wf func(w *world) engine.Workflow) *harness {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &harness{t: t, ctx: ctx, st: st, clock: &Clock{now: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)}, w: newWorld()}
	h.cfg = Config{Store: st, Clock: h.clock.Now, Workflow: wf(h.w), Activities: h.w.activities(t),
		Retry: engine.RetryPolicy{MaxAttempts: 3, Backoff: time.Millisecond, MaxBackoff: time.Millisecond}, LeaseTTL: ttl}
	h.eng = newEngine(t, h.cfg)
	return h
}

// start creates and starts run id.
func (h *harness) start(id string) {
	h.t.Helper()
	if err := h.st.CreateRun(h.ctx, &store.Run{ID: id, Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x", Mode: "async",
		CreatedAt: h.clock.Now()}); err != nil {
		h.t.Fatal(err)
	}
	if err := h.eng.Start(h.ctx, id); err != nil {
		h.t.Fatal(err)
	}
}

// work runs the engine until idle, bounded in time.
func (h *harness) work() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, 2*time.Minute)
	defer cancel()
	if err := h.eng.Work(ctx, 4); err != nil {
		h.t.Fatalf("work: %v", err)
	}
	if ctx.Err() != nil {
		h.t.Fatal("work did not become idle within 2 minutes")
	}
}

// workUntilCrash runs the engine until an activity kills its worker.
func (h *harness) workUntilCrash() {
	h.t.Helper()
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	ctx = context.WithValue(ctx, killKey{}, func() { cancel() })
	done := make(chan error, 1)
	go func() { done <- h.eng.Work(ctx, 4) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		cancel()
		h.t.Fatal("the crash did not happen within 2 minutes")
	}
	if ctx.Err() == nil {
		h.t.Fatal("the engine went idle without reaching the crash point")
	}
}

func (h *harness) run(id string) *store.Run {
	h.t.Helper()
	r, err := h.st.GetRun(h.ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

func (h *harness) events(id string, typ string) []store.Event {
	h.t.Helper()
	evs, err := h.st.Events(h.ctx, id, 0, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []store.Event
	for _, ev := range evs {
		if typ == "" || ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func (h *harness) signal(id, kind, text string) {
	h.t.Helper()
	p, _ := json.Marshal(map[string]string{"text": text})
	if err := h.eng.Signal(h.ctx, id, kind, p); err != nil {
		h.t.Fatal(err)
	}
}

// Exercise runs the suite against the engine newEngine builds.
func Exercise(t *testing.T, newEngine NewEngine) {
	t.Run("CrashAtEveryActivityBoundary", func(t *testing.T) { testCrash(t, newEngine) })
	t.Run("IdempotencyKey", func(t *testing.T) { testKeys(t, newEngine) })
	t.Run("SignalsExactlyOnceInOrder", func(t *testing.T) { testSignals(t, newEngine) })
	t.Run("TimerApprovalExpiry24h", func(t *testing.T) { testTimer(t, newEngine) })
	t.Run("CancelAtNextStepBoundary", func(t *testing.T) { testCancel(t, newEngine) })
	t.Run("Nondeterminism", func(t *testing.T) { testNondeterminism(t, newEngine) })
	t.Run("VerifyNeverGoesLive", func(t *testing.T) { testVerify(t, newEngine) })
	t.Run("WaitingHoldsNothing", func(t *testing.T) { testWaiting(t, newEngine) })
	t.Run("ActivityErrorClasses", func(t *testing.T) { testErrors(t, newEngine) })
}

const steps = 4

func testCrash(t *testing.T, newEngine NewEngine) {
	for step := 1; step <= steps; step++ {
		for _, after := range []bool{false, true} {
			name := fmt.Sprintf("step%d/before-effect", step)
			if after {
				name = fmt.Sprintf("step%d/after-effect-before-record", step)
			}
			t.Run(name, func(t *testing.T) {
				h := newHarness(t, newEngine, func(*world) engine.Workflow { return stepsWorkflow(steps) })
				key := engine.IdempotencyKey("r", step, 0)
				h.w.crash, h.w.crashKey, h.w.crashAfter = func() {}, key, after
				h.start("r")
				h.workUntilCrash()
				// The dead worker's lease runs out; another worker resumes.
				h.clock.Advance(time.Hour)
				h.work()
				r := h.run("r")
				if r.Status != store.StatusCompleted || r.Result != "100" {
					t.Fatalf("run = %s %q, want completed 100", r.Status, r.Result)
				}
				for s := 1; s <= steps; s++ {
					k := engine.IdempotencyKey("r", s, 0)
					wantInv := 1
					if s == step {
						wantInv = 2 // the interrupted attempt and the one that finished
					}
					if got := h.w.invocations[k]; got != wantInv {
						t.Errorf("activity %s ran %d times, want %d (a recorded effect must not run again)", k, got, wantInv)
					}
					if got := h.w.applied[k]; got < 1 || (got > 1 && !(after && s == step)) {
						t.Errorf("effect %s applied %d times", k, got)
					}
				}
				if n := len(h.events("r", "effect")); n != steps {
					t.Fatalf("%d effect events, want %d (one per step, none repeated)", n, steps)
				}
				if _, n, err := h.eng.Verify(h.ctx, "r"); err != nil || n != steps+1 {
					t.Fatalf("verify after the resume: %d events, %v", n, err)
				}
			})
		}
	}
}

func testKeys(t *testing.T, newEngine NewEngine) {
	h := newHarness(t, newEngine, func(*world) engine.Workflow { return stepsWorkflow(steps) })
	h.w.crash, h.w.crashKey, h.w.crashAfter = func() {}, "r2:2:0", true
	h.start("r2")
	h.workUntilCrash()
	h.clock.Advance(time.Hour)
	h.work()
	if len(h.w.invocations) != steps {
		t.Fatalf("keys seen %v, want %d", h.w.invocations, steps)
	}
	for k := range h.w.invocations {
		parts := strings.Split(k, ":")
		if len(parts) != 3 || parts[0] != "r2" || parts[2] != "0" {
			t.Errorf("key %q is not run_id:step:index", k)
		}
	}
	// At-least-once: the activity ran again after the crash, with the same
	// key, so the idempotent service applied it once.
	if h.w.invocations["r2:2:0"] != 2 || h.w.applied["r2:2:0"] != 2 {
		t.Fatalf("re-run after the crash: %d runs, %d applications of r2:2:0; want 2 and 2 (the same key both times)",
			h.w.invocations["r2:2:0"], h.w.applied["r2:2:0"])
	}
}

// signalsWorkflow waits for n messages and returns their texts in order.
func signalsWorkflow(n int) engine.Workflow {
	return func(ctx context.Context, env engine.Env) (engine.Outcome, error) {
		var got []string
		for len(got) < n {
			sigs, err := env.Await(ctx, 1, time.Time{})
			if err != nil {
				return engine.Outcome{}, err
			}
			for _, s := range sigs {
				got = append(got, signalText(s))
			}
		}
		if _, err := env.Record(ctx, "ended", 1, engine.Durable, got); err != nil {
			return engine.Outcome{}, err
		}
		return engine.Outcome{Status: store.StatusCompleted, Result: strings.Join(got, ",")}, nil
	}
}

func testSignals(t *testing.T, newEngine NewEngine) {
	h := newHarness(t, newEngine, func(*world) engine.Workflow { return signalsWorkflow(6) })
	h.start("r")
	h.signal("r", "message", "1") // before the run first waits
	h.work()
	if r := h.run("r"); r.Status != store.StatusWaiting {
		t.Fatalf("status %s, want waiting for more signals", r.Status)
	}
	h.signal("r", "message", "2")
	h.work()
	for _, s := range []string{"3", "4", "5"} { // several while it waits
		h.signal("r", "message", s)
	}
	h.work()
	h.work() // nothing pending: nothing delivered twice
	h.signal("r", "message", "6")
	h.work()
	r := h.run("r")
	if r.Status != store.StatusCompleted || r.Result != "1,2,3,4,5,6" {
		t.Fatalf("run = %s %q, want completed 1,2,3,4,5,6", r.Status, r.Result)
	}
	if n := len(h.events("r", "signal")); n != 6 {
		t.Fatalf("%d signal events, want 6", n)
	}
	if p, _ := h.st.PendingSignals(h.ctx, "r"); len(p) != 0 {
		t.Fatalf("%d signals still pending", len(p))
	}
	if out, _, err := h.eng.Verify(h.ctx, "r"); err != nil || out.Result != r.Result {
		t.Fatalf("verify: %q %v", out.Result, err)
	}
}

// approvalWorkflow waits up to 24 hours for an "approve" signal.
func approvalWorkflow() engine.Workflow {
	return func(ctx context.Context, env engine.Env) (engine.Outcome, error) {
		req, err := env.Record(ctx, "wait_started", 1, engine.Durable, "pay")
		if err != nil {
			return engine.Outcome{}, err
		}
		deadline := req.At.Add(24 * time.Hour)
		outcome := ""
		for outcome == "" {
			sigs, err := env.Await(ctx, 1, deadline)
			if err != nil {
				return engine.Outcome{}, err
			}
			for _, s := range sigs {
				switch {
				case signalKind(s) == engine.SignalTimer && !s.At.Before(deadline):
					outcome = "expired"
				case signalKind(s) == "approve" && outcome == "":
					outcome = "approved"
				}
			}
		}
		if _, err := env.Record(ctx, "wait_ended", 1, engine.Durable, outcome); err != nil {
			return engine.Outcome{}, err
		}
		return engine.Outcome{Status: store.StatusCompleted, Result: outcome}, nil
	}
}

func testTimer(t *testing.T, newEngine NewEngine) {
	t.Run("expires", func(t *testing.T) {
		h := newHarness(t, newEngine, func(*world) engine.Workflow { return approvalWorkflow() })
		h.start("r")
		h.work()
		h.clock.Advance(23*time.Hour + 59*time.Minute)
		h.work()
		if r := h.run("r"); r.Status != store.StatusWaiting {
			t.Fatalf("after 23h59m: %s, want still waiting", r.Status)
		}
		if n := len(h.events("r", "signal")); n != 0 {
			t.Fatalf("a timer fired early: %d signals", n)
		}
		h.clock.Advance(2 * time.Minute)
		h.work()
		r := h.run("r")
		if r.Status != store.StatusCompleted || r.Result != "expired" {
			t.Fatalf("after 24h: %s %q, want completed expired", r.Status, r.Result)
		}
		sigs := h.events("r", "signal")
		if len(sigs) != 1 {
			t.Fatalf("%d signals recorded, want the one timer", len(sigs))
		}
		if out, _, err := h.eng.Verify(h.ctx, "r"); err != nil || out.Result != "expired" {
			t.Fatalf("verify: %q %v", out.Result, err)
		}
	})
	t.Run("decided before expiry", func(t *testing.T) {
		h := newHarness(t, newEngine, func(*world) engine.Workflow { return approvalWorkflow() })
		h.start("r")
		h.work()
		h.clock.Advance(5 * time.Hour)
		h.signal("r", "approve", "ok")
		h.work()
		if r := h.run("r"); r.Status != store.StatusCompleted || r.Result != "approved" {
			t.Fatalf("run = %s %q, want completed approved", r.Status, r.Result)
		}
		h.clock.Advance(48 * time.Hour)
		h.work()
		if n := len(h.events("r", "signal")); n != 1 {
			t.Fatalf("%d signals, want only the approval (no timer after the run ended)", n)
		}
	})
}

func testCancel(t *testing.T, newEngine NewEngine) {
	var h *harness
	h = newHarness(t, newEngine, func(w *world) engine.Workflow {
		w.onStep = func(step int) {
			if step == 2 { // a cancel arrives while step 2's activity runs
				p, _ := json.Marshal(map[string]string{"text": "stop"})
				if err := h.eng.Signal(context.Background(), "r", "cancel", p); err != nil {
					panic(err)
				}
			}
		}
		return stepsWorkflow(steps)
	})
	h.start("r")
	h.work()
	r := h.run("r")
	if r.Status != store.StatusCancelled || r.Result != "cancelled at step 3" {
		t.Fatalf("run = %s %q, want cancelled at step 3 (the step in flight finishes)", r.Status, r.Result)
	}
	if n := len(h.w.invocations); n != 2 {
		t.Fatalf("%d activities ran, want 2 (none after the cancel's step boundary)", n)
	}
}

func testNondeterminism(t *testing.T, newEngine NewEngine) {
	h := newHarness(t, newEngine, func(*world) engine.Workflow { return stepsWorkflow(steps) })
	h.start("r")
	h.work()
	// The same run under changed workflow code: the third step now records
	// another event first.
	changed := func(ctx context.Context, env engine.Env) (engine.Outcome, error) {
		for step := 1; step <= steps; step++ {
			if _, err := env.Signals(ctx, step); err != nil {
				return engine.Outcome{}, err
			}
			if step == 3 {
				if _, err := env.Record(ctx, "note", step, engine.Buffered, "new code"); err != nil {
					return engine.Outcome{}, err
				}
			}
			if _, err := env.Execute(ctx, engine.Call{Activity: "enginetest.effect", Event: "effect", Step: step, Durability: engine.Durable,
				Input: EffectIn{Key: engine.IdempotencyKey(env.Run().ID, step, 0), Step: step, Value: step}}); err != nil {
				return engine.Outcome{}, err
			}
		}
		return engine.Outcome{Status: store.StatusCompleted}, nil
	}
	cfg := h.cfg
	cfg.Workflow = changed
	eng2 := newEngine(t, cfg)
	before := len(h.w.invocations)
	if _, _, err := eng2.Verify(h.ctx, "r"); !errors.Is(err, engine.ErrNondeterminism) {
		t.Fatalf("verify under changed code: %v, want ErrNondeterminism", err)
	}
	if len(h.w.invocations) != before {
		t.Fatal("verify under changed code ran an activity")
	}
	// A run resumed under changed code fails rather than acting on a log
	// its code did not write.
	h2 := newHarness(t, newEngine, func(*world) engine.Workflow { return stepsWorkflow(steps) })
	h2.w.crash, h2.w.crashKey = func() {}, "r:4:0"
	h2.start("r")
	h2.workUntilCrash()
	cfg2 := h2.cfg
	cfg2.Workflow = changed
	h2.eng = newEngine(t, cfg2)
	h2.clock.Advance(time.Hour)
	h2.work()
	r := h2.run("r")
	if r.Status != store.StatusFailed || !strings.Contains(r.Result, "nondeterminism") {
		t.Fatalf("resume under changed code: %s %q, want failed with nondeterminism", r.Status, r.Result)
	}
	if h2.w.applied["r:3:0"] != 1 || h2.w.applied["r:4:0"] != 0 {
		t.Fatalf("changed code acted on the log: %v", h2.w.applied)
	}
}

func testVerify(t *testing.T, newEngine NewEngine) {
	h := newHarness(t, newEngine, func(*world) engine.Workflow { return approvalWorkflow() })
	h.start("w")
	h.work() // waits for approval
	h2 := newHarness(t, newEngine, func(*world) engine.Workflow { return stepsWorkflow(steps) })
	h2.w.crash, h2.w.crashKey = func() {}, "r:3:0"
	h2.start("r")
	h2.workUntilCrash() // stopped mid-run, its lease held by a dead worker
	inv := len(h2.w.invocations)
	if _, n, err := h2.eng.Verify(h2.ctx, "r"); !errors.Is(err, engine.ErrWouldGoLive) || n != 2 {
		t.Fatalf("verify of a log that stops mid-run: %d events, %v; want ErrWouldGoLive after 2", n, err)
	}
	if len(h2.w.invocations) != inv || h2.w.applied["r:3:0"] != 0 {
		t.Fatal("verify ran an activity")
	}
	if _, _, err := h.eng.Verify(h.ctx, "w"); !errors.Is(err, engine.ErrWouldGoLive) {
		t.Fatalf("verify of a waiting run: %v; want ErrWouldGoLive (it may not wait, or deliver a signal)", err)
	}
	h.signal("w", "approve", "ok")
	if _, _, err := h.eng.Verify(h.ctx, "w"); !errors.Is(err, engine.ErrWouldGoLive) {
		t.Fatalf("verify with a signal pending: %v; want ErrWouldGoLive", err)
	}
	if p, _ := h.st.PendingSignals(h.ctx, "w"); len(p) != 1 {
		t.Fatalf("verify consumed a signal: %d pending", len(p))
	}
	if n := len(h.events("w", "")); n != 1 {
		t.Fatalf("verify appended: %d events", n)
	}
}

func testWaiting(t *testing.T, newEngine NewEngine) {
	h := newHarness(t, newEngine, func(*world) engine.Workflow { return signalsWorkflow(1) })
	h.start("warm")
	h.signal("warm", "message", "x")
	h.work()
	runtime.GC()
	base := runtime.NumGoroutine()
	const waiting = 40
	for i := range waiting {
		h.start(fmt.Sprintf("w%d", i))
	}
	ctx, cancel := context.WithTimeout(h.ctx, 2*time.Minute)
	defer cancel()
	// One worker slot: runs that wait must give it back, or the rest
	// would never start and Work would not return.
	if err := h.eng.Work(ctx, 1); err != nil || ctx.Err() != nil {
		t.Fatalf("work with one slot and %d waiting runs: %v %v", waiting, err, ctx.Err())
	}
	for i := range waiting {
		if r := h.run(fmt.Sprintf("w%d", i)); r.Status != store.StatusWaiting {
			t.Fatalf("w%d: %s, want waiting", i, r.Status)
		}
	}
	if g := runtime.NumGoroutine(); g-base >= waiting/4 {
		t.Fatalf("%d goroutines with %d runs waiting, %d before: a waiting run holds a goroutine", g, waiting, base)
	}
	h.signal("w7", "message", "go")
	h.work()
	if r := h.run("w7"); r.Status != store.StatusCompleted || r.Result != "go" {
		t.Fatalf("w7 after its signal: %s %q", r.Status, r.Result)
	}
}

func testErrors(t *testing.T, newEngine NewEngine) {
	cases := []struct {
		name      string
		retryable bool
		failures  int
		status    string
		attempts  int
	}{
		{"retryable then ok", true, 2, store.StatusCompleted, 3},
		{"retryable exhausted", true, 10, store.StatusFailed, 3},
		{"non-retryable", false, 1, store.StatusFailed, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, newEngine, func(*world) engine.Workflow { return stepsWorkflow(steps) })
			h.w.failKey, h.w.failTimes, h.w.failRetryable = "r:2:0", tc.failures, tc.retryable
			h.start("r")
			h.work()
			r := h.run("r")
			if r.Status != tc.status {
				t.Fatalf("run = %s %q, want %s", r.Status, r.Result, tc.status)
			}
			att := h.w.attempts["r:2:0"]
			if len(att) != tc.attempts || att[0] != 1 || att[len(att)-1] != tc.attempts {
				t.Fatalf("attempts %v, want 1..%d", att, tc.attempts)
			}
			if tc.status == store.StatusFailed && !strings.Contains(r.Result, "injected failure") {
				t.Fatalf("failed run's result %q does not say why", r.Result)
			}
			if tc.status == store.StatusFailed && len(h.w.invocations) != 2 {
				t.Fatalf("activities after the failure ran: %v", h.w.invocations)
			}
		})
	}
}
