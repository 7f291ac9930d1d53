package loop_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// noteReached reports whether some prompt after the note carried its text.
func noteReached(t *testing.T, f *fixture, evs []store.Event, text string) bool {
	t.Helper()
	var saw bool
	err := trace.Prompts(context.Background(), f.source(), evs, func(_ *store.Event, _ *trace.ModelCall, req *modelRequest) error {
		for _, m := range req.Messages {
			for _, p := range m.Content {
				if strings.Contains(p.Text, text) {
					saw = true
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return saw
}

// TestLoopDetectionConsecutiveToolErrors: different calls that all fail
// get a note after two failures and stop the run at the third.
func TestLoopDetectionConsecutiveToolErrors(t *testing.T) {
	var turns strings.Builder
	turns.WriteString("turns:\n")
	for i := range 6 {
		fmt.Fprintf(&turns, "  - tool_calls: [{name: read_handle, args: {handle: \"blob:%064d\"}}]\n", i)
	}
	turns.WriteString("  - text: never reached\n")
	f := newFixture(t, fixtureOptions{script: turns.String()})
	run, evs := f.run("errors")
	if run.Status != store.StatusFailed {
		t.Fatalf("status = %s, want failed by loop detection", run.Status)
	}
	res := payloads[trace.ToolResult](t, evs, trace.EvToolResult)
	if len(res) != 3 {
		t.Fatalf("tool results = %d, want 3 (note after 2 errors, stop at 3)", len(res))
	}
	for _, r := range res {
		if r.Status != trace.StatusError {
			t.Fatalf("result status %s, want error", r.Status)
		}
	}
	notes := payloads[trace.LoopNote](t, evs, trace.EvLoopNote)
	if len(notes) != 1 || notes[0].Reason != "tool_errors" {
		t.Fatalf("notes = %+v, want one tool_errors note", notes)
	}
	if !noteReached(t, f, evs, "tool calls failed") {
		t.Fatal("the note did not reach the model")
	}
	if r := lastEnd(t, evs).Reason; !strings.Contains(r, "loop detected: 3 tool calls in a row failed") {
		t.Fatalf("end reason %q", r)
	}
}

// TestLoopDetectionErrorsResetBySuccess: a success between failures
// resets the count, so errors that are not consecutive never stop a run.
func TestLoopDetectionErrorsResetBySuccess(t *testing.T) {
	f := newFixture(t, fixtureOptions{script: `
turns:
  - tool_calls: [{name: read_handle, args: {handle: "a"}}]
  - tool_calls: [{name: read_handle, args: {handle: "b"}}]
  - tool_calls: [{name: echo, args: {text: "ok"}}]
  - tool_calls: [{name: read_handle, args: {handle: "c"}}]
  - tool_calls: [{name: read_handle, args: {handle: "d"}}]
  - text: done
`})
	run, evs := f.run("errors")
	if run.Status != store.StatusCompleted {
		t.Fatalf("status = %s (%s), want completed", run.Status, lastEnd(t, evs).Reason)
	}
	if n := len(payloads[trace.LoopNote](t, evs, trace.EvLoopNote)); n != 2 {
		t.Fatalf("notes = %d, want 2 (one after each pair of failures)", n)
	}
}

// TestLoopDetectionNoNewInformation: calls with different arguments whose
// results are all ones the run has already seen get a note after five such
// steps and stop the run at the eighth.
func TestLoopDetectionNoNewInformation(t *testing.T) {
	var turns strings.Builder
	turns.WriteString("turns:\n")
	for i := range 12 {
		// mutate answers {"changed":true} whatever it is given.
		fmt.Fprintf(&turns, "  - tool_calls: [{name: mutate, args: {n: %d}}]\n", i)
	}
	turns.WriteString("  - text: never reached\n")
	f := newFixture(t, fixtureOptions{script: turns.String()})
	run, evs := f.run("stale")
	if run.Status != store.StatusFailed {
		t.Fatalf("status = %s, want failed by loop detection", run.Status)
	}
	// Step 1 is new; steps 2..9 add nothing: the stop is at step 9.
	if n := len(payloads[trace.ToolResult](t, evs, trace.EvToolResult)); n != 9 {
		t.Fatalf("tool results = %d, want 9 (one new, then 8 steps with nothing new)", n)
	}
	notes := payloads[trace.LoopNote](t, evs, trace.EvLoopNote)
	if len(notes) != 1 || notes[0].Reason != "no_new_information" {
		t.Fatalf("notes = %+v, want one no_new_information note", notes)
	}
	if !noteReached(t, f, evs, "results you had already seen") {
		t.Fatal("the note did not reach the model")
	}
	end := lastEnd(t, evs)
	if !strings.Contains(end.Reason, "loop detected: 8 steps in a row added no new information") {
		t.Fatalf("end reason %q", end.Reason)
	}
}

// TestLoopDetectionNewResultResetsStaleSteps: one new result among old
// ones restarts the count of steps without new information.
func TestLoopDetectionNewResultResetsStaleSteps(t *testing.T) {
	var turns strings.Builder
	turns.WriteString("turns:\n")
	for i := range 14 {
		if i == 7 {
			turns.WriteString("  - tool_calls: [{name: echo, args: {text: \"new\"}}]\n")
			continue
		}
		fmt.Fprintf(&turns, "  - tool_calls: [{name: mutate, args: {n: %d}}]\n", i)
	}
	turns.WriteString("  - text: done\n")
	f := newFixture(t, fixtureOptions{script: turns.String()})
	run, evs := f.run("stale")
	if run.Status != store.StatusCompleted {
		t.Fatalf("status = %s (%s), want completed: no 8 stale steps in a row", run.Status, lastEnd(t, evs).Reason)
	}
}
