package loop_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

var mutations atomic.Int64

var testFuncs = map[string]tool.Func{
	"big": func(_ context.Context, c tool.Call) (tool.Result, error) {
		var a struct{ Size int }
		_ = json.Unmarshal(c.Args, &a)
		if a.Size <= 0 {
			a.Size = 100_000
		}
		return tool.JSONResult(map[string]string{"doc": strings.Repeat("x", a.Size)})
	},
	"slow": func(ctx context.Context, _ tool.Call) (tool.Result, error) {
		<-ctx.Done()
		return tool.Result{}, ctx.Err()
	},
	"read_handle": func(ctx context.Context, c tool.Call) (tool.Result, error) {
		var a struct{ Handle string }
		_ = json.Unmarshal(c.Args, &a)
		data, err := c.Handles.ReadHandle(ctx, a.Handle, 1<<20)
		if err != nil {
			return tool.ErrorResult("%v", err), nil
		}
		return tool.JSONResult(map[string]int{"bytes": len(data)})
	},
	"forbidden": func(context.Context, tool.Call) (tool.Result, error) {
		panic("forbidden tool executed")
	},
	"mutate_echo": func(_ context.Context, c tool.Call) (tool.Result, error) {
		return tool.Result{Output: c.Args}, nil
	},
	"mutate": func(context.Context, tool.Call) (tool.Result, error) {
		mutations.Add(1)
		return tool.JSONResult(map[string]bool{"changed": true})
	},
}

func payloads[T any](t *testing.T, evs []store.Event, typ string) []T {
	t.Helper()
	var out []T
	for _, ev := range evs {
		if ev.Type == typ {
			var v T
			if err := json.Unmarshal(ev.Payload, &v); err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
	}
	return out
}

func lastEnd(t *testing.T, evs []store.Event) trace.RunEnded {
	t.Helper()
	last := evs[len(evs)-1]
	if last.Type != trace.EvRunCompleted && last.Type != trace.EvRunFailed {
		t.Fatalf("last event is %s, not a terminal event", last.Type)
	}
	var e trace.RunEnded
	if err := json.Unmarshal(last.Payload, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

const echoForever = `
final: "Budget reached; I echoed things."
turns:
  - text: "echo"
    tool_calls: [{name: echo, args: {text: "hello"}}]
    usage: {input_tokens: 1000, output_tokens: 100}
`

func TestBounds(t *testing.T) {
	cases := []struct {
		name    string
		budgets string
		alias   string
		clock   bool
		bound   string
	}{
		{"steps", "{max_steps: 3, max_input_tokens: 1000000, max_cost_usd: 10, max_wall_clock: 1h}", "", false, "steps"},
		{"input tokens", "{max_steps: 50, max_input_tokens: 2500, max_cost_usd: 10, max_wall_clock: 1h}", "", false, "input_tokens"},
		// Each call costs 1000*2 + 100*10 = 3000 micro-USD.
		{"cost", "{max_steps: 50, max_input_tokens: 1000000, max_cost_usd: 0.007, max_wall_clock: 1h}", "", false, "cost"},
		{"unknown price fails closed", "{max_steps: 50, max_input_tokens: 1000000, max_cost_usd: 10, max_wall_clock: 1h}", "unpriced", false, "cost"},
		{"wall clock", "{max_steps: 50, max_input_tokens: 1000000, max_cost_usd: 10, max_wall_clock: 90s}", "", true, "wall_clock"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := fixtureOptions{budgets: tc.budgets, script: repeatScript(echoForever), alias: tc.alias}
			if tc.clock {
				// Every clock reading advances 31 s: the 4th step starts past 90 s.
				var ticks atomic.Int64
				base := time.Unix(1_800_000_000, 0)
				o.clock = func() time.Time { return base.Add(time.Duration(ticks.Add(1)) * 31 * time.Second / 4) }
			}
			f := newFixture(t, o)
			run, evs := f.run("echo until a bound stops you")
			if run.Status != store.StatusCompletedPartial {
				t.Fatalf("status = %s, want completed_partial", run.Status)
			}
			b := payloads[trace.Budget](t, evs, trace.EvBudget)
			if len(b) != 1 || b[0].Bound != tc.bound {
				t.Fatalf("budget events = %+v, want one %s", b, tc.bound)
			}
			calls := payloads[trace.ModelCall](t, evs, trace.EvModelCall)
			final := calls[len(calls)-1]
			if !final.NoTools || final.Response == nil || !strings.Contains(final.Response.Text(), "Budget reached") {
				t.Fatalf("last model call = %+v, want a no-tools call answered with the final text", final)
			}
			for _, c := range calls[:len(calls)-1] {
				if c.NoTools {
					t.Fatal("only the last call may be offered no tools")
				}
			}
			if e := lastEnd(t, evs); !strings.Contains(e.Reason, tc.bound) {
				t.Fatalf("end reason %q does not name %s", e.Reason, tc.bound)
			}
			if tc.bound == "steps" && len(calls) != 4 {
				t.Fatalf("model calls = %d, want 3 + the final one", len(calls))
			}
		})
	}
}

// repeatScript makes the fixture's provider repeat the last turn.
func repeatScript(s string) string { return s }

func TestLoopDetection(t *testing.T) {
	f := newFixture(t, fixtureOptions{script: echoForever + strings.Repeat(`
  - text: "again"
    tool_calls: [{name: echo, args: {text: "hello"}}]
`, 6)})
	run, evs := f.run("loop")
	if run.Status != store.StatusFailed {
		t.Fatalf("status = %s, want failed by loop detection", run.Status)
	}
	notes := payloads[trace.LoopNote](t, evs, trace.EvLoopNote)
	if len(notes) != 1 || notes[0].Reason != "repeat" {
		t.Fatalf("notes = %+v, want one repeat note", notes)
	}
	if n := len(payloads[trace.ToolResult](t, evs, trace.EvToolResult)); n != 5 {
		t.Fatalf("tool results = %d, want 5 (note after 3, stop at 5)", n)
	}
	// The note reached the model: the 4th call's prompt contains it.
	var sawNote bool
	err := trace.Prompts(context.Background(), f.source(), evs, func(ev *store.Event, mc *trace.ModelCall, req *modelRequest) error {
		for _, m := range req.Messages {
			for _, p := range m.Content {
				if strings.Contains(p.Text, "same arguments") {
					sawNote = true
				}
			}
		}
		return nil
	})
	if err != nil || !sawNote {
		t.Fatalf("note not in any prompt (err %v)", err)
	}
	if !strings.Contains(lastEnd(t, evs).Reason, "loop detected") {
		t.Fatal("end reason does not say loop detected")
	}
}

func TestSchemaRejectionGoesBackToTheModel(t *testing.T) {
	f := newFixture(t, fixtureOptions{script: `
turns:
  - tool_calls: [{name: echo, args: {txt: "typo"}}]
  - tool_calls: [{name: echo, args: {text: "fixed"}}]
  - text: done
`})
	run, evs := f.run("t")
	if run.Status != store.StatusCompleted {
		t.Fatalf("status %s", run.Status)
	}
	att := payloads[trace.ToolAttempt](t, evs, trace.EvToolAttempt)
	res := payloads[trace.ToolResult](t, evs, trace.EvToolResult)
	if att[0].Decision.Allowed || att[0].Decision.Control != "schema" {
		t.Fatalf("first attempt decision = %+v, want denied by schema", att[0].Decision)
	}
	if res[0].Status != trace.StatusInvalid || !strings.Contains(res[0].Output.Text, "text") {
		t.Fatalf("first result = %+v, want invalid naming the field", res[0])
	}
	if res[1].Status != trace.StatusOK {
		t.Fatalf("corrected call: %+v", res[1])
	}
}

func TestUngrantedToolIsDenied(t *testing.T) {
	before := mutations.Load()
	f := newFixture(t, fixtureOptions{script: `
turns:
  - tool_calls: [{name: forbidden, args: {}}]
  - text: ok
`})
	_, evs := f.run("t")
	att := payloads[trace.ToolAttempt](t, evs, trace.EvToolAttempt)
	res := payloads[trace.ToolResult](t, evs, trace.EvToolResult)
	if att[0].Decision.Allowed || att[0].Decision.Control != "grant" {
		t.Fatalf("decision = %+v, want grant denial", att[0].Decision)
	}
	if res[0].Status != trace.StatusDenied {
		t.Fatalf("result status %s", res[0].Status)
	}
	if mutations.Load() != before {
		t.Fatal("a tool ran")
	}
}

func TestLargeResultBecomesBlobHandle(t *testing.T) {
	f := newFixture(t, fixtureOptions{script: `
turns:
  - tool_calls: [{name: big, args: {size: 200000}}]
  - text: ok
`})
	run, evs := f.run("t")
	if run.Status != store.StatusCompleted {
		t.Fatal(run.Status)
	}
	res := payloads[trace.ToolResult](t, evs, trace.EvToolResult)[0]
	if !res.Truncated || !res.Output.IsBlob() || res.Bytes < 200000 || len(res.Output.Preview) > 512 {
		t.Fatalf("result = truncated %v blob %v bytes %d preview %d", res.Truncated, res.Output.IsBlob(), res.Bytes, len(res.Output.Preview))
	}
	data, err := trace.Load(context.Background(), f.source(), res.Output)
	if err != nil || int64(len(data)) != res.Bytes {
		t.Fatalf("blob holds %d bytes (%v), want %d", len(data), err, res.Bytes)
	}
	// The model saw a handle and a preview, not 200 KB.
	err = trace.Prompts(context.Background(), f.source(), evs, func(ev *store.Event, mc *trace.ModelCall, req *modelRequest) error {
		if ev.Step == 2 {
			last := req.Messages[len(req.Messages)-1].Content[0].Text
			if len(last) > 2000 || !strings.Contains(last, "blob:"+res.Output.Blob) {
				t.Fatalf("model saw %d bytes without the handle", len(last))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A tool can be handed a blob by handle only when this run showed the model
// that handle: another blob in the same store, named by its hash, is refused.
func TestHandlesAreRunScoped(t *testing.T) {
	other := []byte("another run's data: " + strings.Repeat("y", 10_000))
	sum := sha256.Sum256(other)
	foreign := "blob:" + hex.EncodeToString(sum[:])
	f := newFixture(t, fixtureOptions{script: `
turns:
  - tool_calls: [{name: big, args: {size: 200000}}]
  - tool_calls: [{name: read_handle, args: {handle: $last_handle}}]
  - tool_calls: [{name: read_handle, args: {handle: "` + foreign + `"}}]
  - tool_calls: [{name: read_handle, args: {handle: "blob:../../etc/passwd"}}]
  - text: ok
`})
	if _, err := f.p.Store.Blobs(testTenant).PutBlob(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	run, evs := f.run("t")
	if run.Status != store.StatusCompleted {
		t.Fatal(run.Status)
	}
	res := payloads[trace.ToolResult](t, evs, trace.EvToolResult)
	if len(res) != 4 {
		t.Fatalf("%d tool results", len(res))
	}
	if res[1].Status != trace.StatusOK || res[1].Output.Text != fmt.Sprintf(`{"bytes":%d}`, res[0].Bytes) {
		t.Fatalf("own handle: %s %s, want the %d bytes of the earlier result", res[1].Status, res[1].Output.Text, res[0].Bytes)
	}
	for _, r := range res[2:] {
		if r.Status != trace.StatusError || !strings.Contains(r.Output.Text, "not a handle this run has seen") {
			t.Fatalf("foreign handle: %s %s, want refused", r.Status, r.Output.Text)
		}
	}
}

func TestToolTimeout(t *testing.T) {
	f := newFixture(t, fixtureOptions{script: `
turns:
  - tool_calls: [{name: slow, args: {}}]
  - text: ok
`})
	_, evs := f.run("t")
	if res := payloads[trace.ToolResult](t, evs, trace.EvToolResult)[0]; res.Status != trace.StatusTimeout {
		t.Fatalf("status %s, want timeout", res.Status)
	}
}

// failingStore fails every durable append, as a full or broken disk would.
type failingStore struct {
	store.Store
}

func (s failingStore) Append(ctx context.Context, req store.AppendRequest) error {
	if req.Durable {
		return errors.New("disk full")
	}
	return s.Store.Append(ctx, req)
}

func TestUnwritableLogStopsSideEffects(t *testing.T) {
	before := mutations.Load()
	f := newFixture(t, fixtureOptions{wrap: func(s store.Store) store.Store { return failingStore{s} }, script: `
turns:
  - tool_calls: [{name: mutate, args: {}}]
  - text: ok
`})
	ctx := context.Background()
	r, err := f.p.Runs.Start(ctx, startReq())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.p.Embedded.Execute(ctx, r.ID); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("execute err = %v, want the append failure", err)
	}
	if mutations.Load() != before {
		t.Fatal("the side-effecting tool ran although its attempt could not be recorded")
	}
	got, _ := f.p.Store.GetRun(ctx, r.ID)
	if got.Status != store.StatusFailed {
		t.Fatalf("status %s, want failed", got.Status)
	}
}

func TestVerifyReproducesFinishedRun(t *testing.T) {
	f := newFixture(t, fixtureOptions{script: `
turns:
  - tool_calls: [{name: echo, args: {text: "a"}}, {name: mutate, args: {}}]
  - tool_calls: [{name: big, args: {size: 50000}}]
  - text: done
`})
	run, evs := f.run("t")
	before := mutations.Load()
	v, err := f.p.Engine.Verify(context.Background(), run.ID)
	if err != nil || v.Events != len(evs) || v.Status != store.StatusCompleted {
		t.Fatalf("verify: %+v %d/%d %v", v, v.Events, len(evs), err)
	}
	if mutations.Load() != before {
		t.Fatal("verify executed a tool")
	}
	rep, err := trace.Verify(context.Background(), f.source(), run.ID)
	if err != nil || !rep.OK() || rep.Prompts != 3 {
		t.Fatalf("trace verify: %+v %v", rep, err)
	}
}

// The gateway refuses, from its estimate and before sending anything, the
// call that would cross the token budget; the run then makes its last call.
func TestBudgetPrecheckRefusesBeforeSending(t *testing.T) {
	f := newFixture(t, fixtureOptions{budgets: "{max_steps: 50, max_input_tokens: 2100, max_cost_usd: 10, max_wall_clock: 1h}", script: echoForever})
	run, evs := f.run("echo")
	if run.Status != store.StatusCompletedPartial {
		t.Fatalf("status %s", run.Status)
	}
	calls := payloads[trace.ModelCall](t, evs, trace.EvModelCall)
	var refused *trace.ModelCall
	for i := range calls {
		if calls[i].BudgetRefused != nil {
			refused = &calls[i]
		}
	}
	if refused == nil || refused.Response != nil || refused.BudgetRefused.Bound != "input_tokens" {
		t.Fatalf("no refused call recorded: %+v", calls)
	}
	if refused.BudgetRefused.Value <= 2100 {
		t.Fatalf("refusal value %d does not cross the limit", refused.BudgetRefused.Value)
	}
	// Two calls ran (2,000 tokens), the third was refused, then the final.
	if run.Steps != 3 || run.InputTokens > 2100+1000 {
		t.Fatalf("steps %d tokens %d", run.Steps, run.InputTokens)
	}
	if v, err := f.p.Engine.Verify(context.Background(), run.ID); err != nil || v.Events != len(evs) {
		t.Fatalf("verify %d/%d %v", v.Events, len(evs), err)
	}
}

// A run uses the manifest it pinned when it started, by hash, even when
// the process already holds another version of the tool: a second run
// started after the tool changed gets the new manifest (its output is no
// longer trusted, so reading it taints the run), and verifying the first
// again uses its own.
func TestEachRunKeepsItsPinnedManifest(t *testing.T) {
	f := newFixture(t, fixtureOptions{script: `
turns:
  - tool_calls: [{name: echo, args: {text: "hello"}}]
  - text: done
`})
	ctx := context.Background()
	v1, err := tool.ParseManifests("tools.yaml", []byte(testTools))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.p.Catalog.Review(v1...); err != nil { // every tool the agent is shown
		t.Fatal(err)
	}
	first, evs1 := f.run("t")
	if first.Status != store.StatusCompleted || len(payloads[trace.Taint](t, evs1, trace.EvTaint)) != 0 {
		t.Fatalf("first run: %s, taints %d; want completed without taint (echo's output is trusted)", first.Status, len(payloads[trace.Taint](t, evs1, trace.EvTaint)))
	}
	ms, err := tool.ParseManifests("echo.yaml", []byte(`
name: echo
description: Returns its arguments, which may now come from outside.
tier: 1
timeout_ms: 1000
input_schema: {type: object, additionalProperties: false, required: [text], properties: {text: {type: string, maxLength: 100000}}}
side_effects: none
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.p.Catalog.Review(ms...); err != nil {
		t.Fatal(err)
	}
	if _, err := f.p.ApplyManifests(ctx, ms); err != nil {
		t.Fatal(err)
	}
	second, evs2 := f.run("t")
	if taints := payloads[trace.Taint](t, evs2, trace.EvTaint); second.Status != store.StatusCompleted || len(taints) != 1 || taints[0].Tool != "echo" {
		t.Fatalf("second run, after echo's output became untrusted: %s, taints %+v; want one taint by echo", second.Status, taints)
	}
	pinned := func(evs []store.Event) string {
		rs := payloads[trace.RunStarted](t, evs, trace.EvRunStarted)
		for _, ref := range rs[0].Tools {
			if ref.Name == "echo" {
				return ref.Hash
			}
		}
		t.Fatal("echo not pinned")
		return ""
	}
	if pinned(evs1) == pinned(evs2) {
		t.Fatal("both runs pinned the same echo manifest")
	}
	for _, r := range []*store.Run{first, second} {
		if v, err := f.p.Engine.Verify(ctx, r.ID); err != nil || v.Status != store.StatusCompleted {
			t.Fatalf("verify %s: %+v %v", r.ID, v, err)
		}
	}
}
