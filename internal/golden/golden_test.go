package golden_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/internal/cli"
	"github.com/agentplane/agentplane/internal/golden"
	"github.com/agentplane/agentplane/loop"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/sqlite"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

// expectation is what the trace of a fixture's last run must show.
type expectation struct {
	status string
	// trace lists lines (or parts of lines) `agentplane trace` must print.
	trace []string
	// events counts event types the log must hold at least this often.
	events map[string]int
}

// expected covers every fixture of every golden set by name; a set that
// adds a fixture adds its expectation here (the old ones never change).
var expected = map[string]expectation{
	"approvals": {
		status: store.StatusCompleted,
		trace: []string{
			"run run_golden_approvals  card-dispute-assistant@1  tenant=example-bank user=priya@example-bank.in",
			"call   issue_refund {\"amount_inr\":12499,",
			"[waits for approval by card-ops-supervisors]",
			"approval apr_run_golden_approvals_4_0 approved by meera@example-bank.in: duplicate charge confirmed against the statement",
			"[waits for approval by card-ops-agents]",
			"approval apr_run_golden_approvals_6_0 approved by meera@example-bank.in",
			"taint  the run has read untrusted content (tool_output: get_ticket)",
			"end     completed",
		},
		events: map[string]int{trace.EvApprovalReq: 2, trace.EvApprovalDec: 2, trace.EvModelCall: 7},
	},
	"edited": {
		status: store.StatusCompleted,
		trace: []string{
			"approval apr_run_golden_edited_4_0 edited by meera@example-bank.in: reason reworded for the statement",
			`new arguments {"amount_inr":12499,"customer_id":"c_88213","reason":"Supervisor-edited: duplicate of txn_1001, PNR K7QX2M","transaction_id":"txn_1002"}`,
			"decided again: allowed",
			"approval apr_run_golden_edited_6_0 approved by meera@example-bank.in",
			"end     completed",
		},
		events: map[string]int{trace.EvApprovalDec: 2},
	},
	"replay": {
		status: store.StatusCompleted,
		trace: []string{
			"run run_golden_replay  card-dispute-assistant@1",
			"replay  of run_golden_original from step 4, mode live",
			"replayed from seq 3: no call, no cost",
			"replayed from seq 14: no call, no cost",
			"result issue_refund ok",
			"[replay: recorded]",
			"end     completed",
		},
		events: map[string]int{trace.EvModelCall: 7},
	},
	"compacted": {
		status: store.StatusCompleted,
		trace: []string{
			"run run_golden_compacted  card-dispute-assistant@2",
			"compaction ",
			"messages folded into a note, ",
			"Progress so far: read ticket T-40127",
			"approval apr_run_golden_compacted_4_0 approved",
			"end     completed",
		},
		events: map[string]int{trace.EvCompaction: 1},
	},
	"budget": {
		status: store.StatusCompletedPartial,
		trace: []string{
			"run run_golden_budget  card-dispute-assistant@2",
			"budget  steps reached (limit 3, value 3)",
			"note   [budget] Budget reached (steps). You cannot call tools any more.",
			"Budget reached; here is what I found so far",
			"end     completed_partial (budget reached: steps)",
		},
		events: map[string]int{trace.EvBudget: 1},
	},
	"loopdetect": {
		status: store.StatusFailed,
		trace: []string{
			"(too large for the context: the model sees handle blob:",
			"note   [repeat] Note from the platform: you have called get_card_transactions 3 times",
			"end     failed (loop detected: get_card_transactions called 5 times with the same arguments and the same result)",
		},
		events: map[string]int{trace.EvLoopNote: 1, trace.EvToolResult: 6},
	},
}

// fixtureDirs lists every fixture of every golden set in testdata.
func fixtureDirs(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join("testdata", "*", "*", "fixture.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range dirs {
		out = append(out, filepath.Dir(d))
	}
	if len(out) < len(expected) {
		t.Fatalf("found %d golden fixtures, want at least %d (one per expectation)", len(out), len(expected))
	}
	return out
}

// TestGoldenLogs imports every frozen log into a fresh embedded store and
// checks that today's code still reads it: trace verify (chain, blobs,
// every prompt hash), the trace rendering, and a re-run of the loop over
// the log that reaches the recorded end without calling a model or a tool.
func TestGoldenLogs(t *testing.T) {
	blobs := 0
	for _, dir := range fixtureDirs(t) {
		fx, err := golden.Read(dir)
		if err != nil {
			t.Fatal(err)
		}
		blobs += len(fx.Blobs)
		t.Run(dir, func(t *testing.T) {
			want, ok := expected[fx.Name]
			if !ok {
				t.Fatalf("fixture %s has no expectation", fx.Name)
			}
			ctx := context.Background()
			data := importFixture(t, fx)
			last := &fx.Runs[len(fx.Runs)-1]
			if last.Row.Status != want.status {
				t.Fatalf("recorded status %s, want %s", last.Row.Status, want.status)
			}
			for typ, n := range want.events {
				if got := countType(last.Events, typ); got < n {
					t.Errorf("%d %s events, want at least %d", got, typ, n)
				}
			}
			st := openStore(t, data)
			for _, r := range fx.Runs {
				rep, err := trace.Verify(ctx, trace.SourceFor(st, r.Row.Tenant), r.Row.ID)
				if err != nil || !rep.OK() {
					t.Fatalf("trace verify %s: %+v %v", r.Row.ID, rep, err)
				}
				if rep.Events != len(r.Events) || rep.Prompts != countType(r.Events, trace.EvModelCall) || rep.Prompts == 0 {
					t.Fatalf("trace verify %s checked %d events and %d prompts of %d and %d", r.Row.ID, rep.Events, rep.Prompts,
						len(r.Events), countType(r.Events, trace.EvModelCall))
				}
				rerun(t, st, fx, &r)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			for _, r := range fx.Runs {
				out, code := agentplane(t, "trace", "verify", r.Row.ID, "--data", data)
				wantOK := fmt.Sprintf("ok: run %s: %d events chained, %d blobs verified, %d prompts rebuilt byte for byte",
					r.Row.ID, len(r.Events), blobRefCount(r.Events), countType(r.Events, trace.EvModelCall))
				if code != 0 || !strings.Contains(out, wantOK) {
					t.Fatalf("agentplane trace verify %s: exit %d\n%s\nwant %q", r.Row.ID, code, out, wantOK)
				}
			}
			for _, r := range fx.Runs {
				traceJSON(t, data, &r)
			}
			out, code := agentplane(t, "trace", last.Row.ID, "--data", data)
			if code != 0 {
				t.Fatalf("agentplane trace: exit %d\n%s", code, out)
			}
			for _, s := range want.trace {
				if !strings.Contains(out, s) {
					t.Errorf("agentplane trace %s does not show %q", last.Row.ID, s)
				}
			}
			if strings.Contains(out, "DOES NOT MATCH") || strings.Count(out, "matches the recorded hash") != countType(last.Events, trace.EvModelCall) {
				t.Errorf("agentplane trace: not every rebuilt prompt matches its recorded hash:\n%s", out)
			}
			if t.Failed() {
				t.Logf("trace output:\n%s", out)
			}
		})
	}
	if blobs == 0 {
		t.Fatal("no golden fixture holds a blob: the blob paths of verify and the transcript go untested")
	}
}

// TestGoldenTamperedFails shows the golden test can fail: a copy of each
// fixture with one flipped byte in an event payload, or in a blob, fails
// verification (trace.Verify and `agentplane trace verify`), a log the
// loop's code does not produce fails the re-run with ErrNondeterminism, and a
// log cut short makes it stop with ErrWouldGoLive rather than go live.
func TestGoldenTamperedFails(t *testing.T) {
	for _, dir := range fixtureDirs(t) {
		t.Run(dir, func(t *testing.T) {
			ctx := context.Background()
			t.Run("payload", func(t *testing.T) {
				fx := readFixture(t, dir)
				r := &fx.Runs[len(fx.Runs)-1]
				seq := flipPayloadByte(t, r.Events)
				data := importFixture(t, fx)
				st := openStore(t, data)
				rep, err := trace.Verify(ctx, trace.SourceFor(st, r.Row.Tenant), r.Row.ID)
				if err != nil {
					t.Fatal(err)
				}
				if !hasProblem(rep, seq, "tampered") {
					t.Fatalf("a flipped byte at seq %d went undetected: %+v", seq, rep.Problems)
				}
				st.Close()
				out, code := agentplane(t, "trace", "verify", r.Row.ID, "--data", data)
				if code != 1 || !strings.Contains(out, fmt.Sprintf("FAIL seq %d: event hash does not match its content (tampered)", seq)) {
					t.Fatalf("agentplane trace verify on a tampered log: exit %d\n%s", code, out)
				}
			})
			t.Run("blob", func(t *testing.T) {
				fx := readFixture(t, dir)
				if len(fx.Blobs) == 0 {
					t.Skip("this fixture references no blob")
				}
				var sum [32]byte
				for k := range fx.Blobs {
					if bytes.Compare(k[:], sum[:]) > 0 {
						sum = k
					}
				}
				// A fixture whose blob file was edited is refused on import.
				bad := readFixture(t, dir)
				bad.Blobs[sum] = flipped(bad.Blobs[sum])
				st := openStore(t, t.TempDir())
				if err := golden.Import(ctx, st, bad); err == nil || !strings.Contains(err.Error(), "does not match its name") {
					t.Fatalf("import of a tampered blob: %v", err)
				}
				st.Close()
				// A blob edited in the store after import fails verification.
				data := importFixture(t, fx)
				st = openStore(t, data)
				for _, r := range fx.Runs {
					if !referencesBlob(r.Events, sum) {
						continue
					}
					if err := os.WriteFile(st.BlobPath(r.Row.Tenant, sum), flipped(fx.Blobs[sum]), 0o600); err != nil {
						t.Fatal(err)
					}
					rep, err := trace.Verify(ctx, trace.SourceFor(st, r.Row.Tenant), r.Row.ID)
					if err != nil {
						t.Fatal(err)
					}
					if !hasProblem(rep, -1, "content does not match its hash (tampered)") {
						t.Fatalf("a flipped blob byte went undetected in %s: %+v", r.Row.ID, rep.Problems)
					}
					st.Close()
					out, code := agentplane(t, "trace", "verify", r.Row.ID, "--data", data)
					if code != 1 || !strings.Contains(out, "content does not match its hash (tampered)") {
						t.Fatalf("agentplane trace verify on a tampered blob: exit %d\n%s", code, out)
					}
					return
				}
				t.Fatal("no run references the blob")
			})
			t.Run("nondeterminism", func(t *testing.T) {
				// A log whose first step boundary holds another event is
				// not what the loop's code records: the re-run must say so.
				fx := readFixture(t, dir)
				r := &fx.Runs[len(fx.Runs)-1]
				i := 0
				for i < len(r.Events) && r.Events[i].Type != trace.EvStepStarted {
					i++
				}
				if i == len(r.Events) {
					t.Fatal("no step_started")
				}
				r.Events[i].Type = trace.EvLoopNote
				// Re-chain from there: a consistent log (the engine checks
				// the chain before it resumes or verifies a run) that the
				// loop's code would not have written.
				for j := i; j < len(r.Events); j++ {
					if j > 0 {
						r.Events[j].PrevHash = r.Events[j-1].Hash
					}
					r.Events[j].Hash = store.ChainHash(r.Events[j].PrevHash, &r.Events[j])
				}
				data := importFixture(t, fx)
				st := openStore(t, data)
				calls := &liveCalls{t: t}
				if _, err := verifier(t, st, fx, calls).Verify(ctx, r.Row.ID); !errors.Is(err, engine.ErrNondeterminism) {
					t.Fatalf("re-run over a log the code does not produce: %v, want ErrNondeterminism", err)
				}
				calls.none()
			})
			t.Run("cut before its end", func(t *testing.T) {
				// A log that stops just before its terminal event: the
				// re-run needs the end, which it may not record, and it
				// ends no sandbox on the way (verify never goes live).
				fx := readFixture(t, dir)
				r := &fx.Runs[len(fx.Runs)-1]
				last := r.Events[len(r.Events)-1].Type
				if last != trace.EvRunCompleted && last != trace.EvRunFailed {
					t.Fatalf("last event %s, want a terminal one", last)
				}
				r.Events = r.Events[:len(r.Events)-1]
				data := importFixture(t, fx)
				st := openStore(t, data)
				calls := &liveCalls{t: t}
				v, err := verifier(t, st, fx, calls).Verify(ctx, r.Row.ID)
				if !errors.Is(err, engine.ErrWouldGoLive) || v.Events != len(r.Events) {
					t.Fatalf("re-run over a log without its end: %d/%d events, %v; want ErrWouldGoLive", v.Events, len(r.Events), err)
				}
				calls.none()
			})
			t.Run("truncated", func(t *testing.T) {
				// Cut after a model call that proposed a tool call: the
				// loop then needs a tool_attempt the log does not hold.
				fx := readFixture(t, dir)
				r := &fx.Runs[len(fx.Runs)-1]
				cut := 0
				for i := 1; i < len(r.Events); i++ {
					if r.Events[i-1].Type == trace.EvModelCall && r.Events[i].Type == trace.EvToolAttempt {
						cut = i
					}
				}
				if cut == 0 {
					t.Fatal("no model call followed by a tool attempt")
				}
				r.Events = r.Events[:cut]
				data := importFixture(t, fx)
				st := openStore(t, data)
				calls := &liveCalls{t: t}
				eng := verifier(t, st, fx, calls)
				v, err := eng.Verify(ctx, r.Row.ID)
				if !errors.Is(err, engine.ErrWouldGoLive) || v.Events != len(r.Events) {
					t.Fatalf("re-run over a log without its last event: %d/%d events, %v; want ErrWouldGoLive", v.Events, len(r.Events), err)
				}
				calls.none()
			})
		})
	}
}

func readFixture(t *testing.T, dir string) *golden.Fixture {
	t.Helper()
	fx, err := golden.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	return fx
}

func openStore(t *testing.T, dir string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// importFixture writes fx into a fresh data directory and returns it.
func importFixture(t *testing.T, fx *golden.Fixture) string {
	t.Helper()
	data := filepath.Join(t.TempDir(), "data")
	st := openStore(t, data)
	if err := golden.Import(context.Background(), st, fx); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return data
}

// agentplane runs the CLI in process and returns its output and exit code.
func agentplane(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	code := cli.Main(context.Background(), args, &out, &out)
	return out.String(), code
}

// liveCalls counts what a re-run over a recorded log must never do: call
// a model, run or decide a tool, resolve an agent, read replay
// instructions, end sandboxes, or read the clock to append an event.
type liveCalls struct {
	t *testing.T
	n atomic.Int64
}

func (c *liveCalls) called(what string) {
	c.n.Add(1)
	c.t.Errorf("the re-run went live: %s", what)
}

func (c *liveCalls) none() {
	c.t.Helper()
	if n := c.n.Load(); n != 0 {
		c.t.Fatalf("the re-run made %d live calls", n)
	}
}

func (c *liveCalls) Complete(_ context.Context, alias string, _ *model.Request, a model.Attribution) (*model.CallResult, error) {
	c.called(fmt.Sprintf("model %s at step %d", alias, a.Step))
	return nil, errors.New("no live model in a re-run")
}

func (c *liveCalls) EndRun(_ context.Context, _, runID string) []trace.SandboxTeardown {
	c.called("end sandboxes of " + runID)
	return nil
}

func (c *liveCalls) now() time.Time {
	c.called("the clock")
	return time.Time{}
}

// verifier builds today's loop and engine over st with every live
// dependency replaced by one that fails the test when called.
func verifier(t *testing.T, st *sqlite.Store, fx *golden.Fixture, calls *liveCalls) engine.Engine {
	t.Helper()
	cat := tool.NewCatalog()
	for _, rec := range fx.Tools {
		m, err := tool.ManifestFromJSON(rec.Manifest)
		if err != nil {
			t.Fatalf("pinned manifest %s: %v", rec.Name, err)
		}
		name := m.Name
		if err := cat.Register(name, func(context.Context, tool.Call) (tool.Result, error) {
			calls.called("tool " + name)
			return tool.Result{}, errors.New("no live tool in a re-run")
		}); err != nil && !strings.Contains(err.Error(), "already") {
			t.Fatal(err)
		}
	}
	br, err := broker.New(broker.Options{Catalog: cat, Clock: calls.now})
	if err != nil {
		t.Fatal(err)
	}
	l, err := loop.New(loop.Options{
		Resolve: func(_ context.Context, name string, version int) (*loop.Agent, error) {
			calls.called(fmt.Sprintf("resolve %s@%d", name, version))
			return nil, errors.New("no resolver in a re-run")
		},
		ReplaySpec: func(_ context.Context, runID string) (*trace.ReplayInfo, error) {
			calls.called("replay instructions of " + runID)
			return nil, errors.New("no replay instructions in a re-run")
		},
		Models: calls, Broker: br, Tools: st, Blobs: st, Sandboxes: calls,
	})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.NewEmbedded(engine.Options{Store: st, Workflow: l.Workflow, Activities: l.Activities(), Clock: calls.now})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// rerun runs today's loop over the recorded log in verify mode: it must
// consume every event, end as recorded and go live nowhere.
func rerun(t *testing.T, st *sqlite.Store, fx *golden.Fixture, r *golden.Run) {
	t.Helper()
	calls := &liveCalls{t: t}
	out, err := verifier(t, st, fx, calls).Verify(context.Background(), r.Row.ID)
	n := out.Events
	if err != nil {
		t.Fatalf("re-run of %s over its log: %v (after %d of %d events)", r.Row.ID, err, n, len(r.Events))
	}
	if n != len(r.Events) {
		t.Fatalf("re-run of %s consumed %d of %d events", r.Row.ID, n, len(r.Events))
	}
	if out.Status != r.Row.Status || out.Result != r.Row.Result {
		t.Fatalf("re-run of %s ended %s %q, recorded %s %q", r.Row.ID, out.Status, out.Result, r.Row.Status, r.Row.Result)
	}
	calls.none()
}

// traceJSON checks that `agentplane trace --json` exports the recorded
// events exactly: every field, the payload byte for byte.
func traceJSON(t *testing.T, data string, r *golden.Run) {
	t.Helper()
	out, code := agentplane(t, "trace", r.Row.ID, "--json", "--data", data)
	if code != 0 {
		t.Fatalf("agentplane trace --json: exit %d\n%s", code, out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(r.Events) {
		t.Fatalf("agentplane trace --json printed %d lines for %d events", len(lines), len(r.Events))
	}
	for i, line := range lines {
		var got struct {
			RunID    string          `json:"run_id"`
			Seq      int64           `json:"seq"`
			Type     string          `json:"type"`
			Step     int             `json:"step"`
			At       string          `json:"at"`
			Payload  json.RawMessage `json:"payload"`
			PrevHash string          `json:"prev_hash"`
			Hash     string          `json:"hash"`
		}
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("trace --json line %d: %v", i+1, err)
		}
		ev := &r.Events[i]
		at, err := time.Parse(time.RFC3339Nano, got.At)
		if err != nil || got.RunID != r.Row.ID || got.Seq != ev.Seq || got.Type != ev.Type || got.Step != ev.Step || !at.Equal(ev.At) ||
			!bytes.Equal(got.Payload, ev.Payload) || got.PrevHash != hex.EncodeToString(ev.PrevHash[:]) || got.Hash != hex.EncodeToString(ev.Hash[:]) {
			t.Fatalf("trace --json seq %d differs from the recorded event:\n%s", ev.Seq, line)
		}
	}
}

func countType(evs []store.Event, typ string) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// blobRefCount is how many distinct blobs a run's events reference.
func blobRefCount(evs []store.Event) int {
	seen := map[string]bool{}
	for _, ev := range evs {
		refs, _ := trace.BlobRefs(&ev) // a payload that does not decode fails verification elsewhere
		for _, c := range refs {
			seen[c.Blob] = true
		}
	}
	return len(seen)
}

func referencesBlob(evs []store.Event, sum [32]byte) bool {
	for _, ev := range evs {
		refs, _ := trace.BlobRefs(&ev)
		for _, c := range refs {
			if s, err := c.Sum(); err == nil && s == sum {
				return true
			}
		}
	}
	return false
}

// flipPayloadByte changes the case of one letter inside a payload string
// of the middle event (the JSON stays valid; only the hash can tell) and
// returns the event's seq.
func flipPayloadByte(t *testing.T, evs []store.Event) int64 {
	t.Helper()
	for k := len(evs) / 2; k < len(evs); k++ {
		p := evs[k].Payload
		for i := len(p) / 2; i < len(p); i++ {
			c := p[i] | 0x20
			if c < 'a' || c > 'z' || i == 0 || (p[i-1]|0x20) < 'a' || (p[i-1]|0x20) > 'z' {
				continue
			}
			q := append([]byte(nil), p...)
			q[i] ^= 0x20
			if json.Valid(q) {
				evs[k].Payload = q
				return evs[k].Seq
			}
		}
	}
	t.Fatal("no byte to flip")
	return 0
}

func flipped(b []byte) []byte {
	out := append([]byte(nil), b...)
	out[len(out)/2] ^= 0x01
	return out
}

// hasProblem reports whether rep names detail at seq (-1: any seq).
func hasProblem(rep *trace.Report, seq int64, detail string) bool {
	for _, p := range rep.Problems {
		if (seq < 0 || p.Seq == seq) && strings.Contains(p.Detail, detail) {
			return true
		}
	}
	return false
}
