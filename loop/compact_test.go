package loop_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// noteModel answers compaction calls (alias "small") with a note that
// forgets identifiers, and agent calls with echo calls carrying ids.
type noteModel struct{ steps int }

func (m noteModel) Complete(_ context.Context, alias string, req *model.Request, a model.Attribution) (*model.CallResult, error) {
	usage := model.Usage{InputTokens: model.EstimateTokens(req), OutputTokens: 50}
	resp := &model.Response{StopReason: model.StopEndTurn, Usage: usage}
	if alias == "small" {
		resp.Content = []model.Part{{Type: model.PartText, Text: "Progress: echoed several ids."}}
	} else {
		turn := a.Step - 1 // the prompt shrinks after compaction; the step does not
		if turn < m.steps && !req.ForbidToolCalls {
			resp.StopReason = model.StopToolUse
			resp.Content = []model.Part{{Type: model.PartToolUse, ToolUseID: fmt.Sprintf("toolu_%d", turn), Name: "echo",
				Input: []byte(fmt.Sprintf(`{"text":"ID-%04d"}`, turn))}}
		} else {
			resp.Content = []model.Part{{Type: model.PartText, Text: "done"}}
		}
	}
	return &model.CallResult{Response: resp, Usage: usage, Cost: model.Money{Micros: 10, Currency: "USD"}, CostKnown: true, ModelID: alias}, nil
}

func TestCompactionKeepsEveryIdentifierAndReplays(t *testing.T) {
	f := newFixture(t, fixtureOptions{models: noteModel{steps: 8}, agentExtra: "context: {compact_every_steps: 4, keep_recent_steps: 1}\n", small: "small"})
	run, evs := f.run("echo ids")
	if run.Status != store.StatusCompleted {
		t.Fatalf("status %s", run.Status)
	}
	comps := payloads[trace.Compaction](t, evs, trace.EvCompaction)
	if len(comps) == 0 {
		t.Fatal("no compaction recorded")
	}
	for _, c := range comps {
		if c.Error != "" || len(c.Restored) == 0 {
			t.Fatalf("compaction %+v: the note dropped ids, which must be restored", c)
		}
	}
	// After the first compaction the prompts are shorter than the log, yet
	// every id of the compacted steps is still in the prompt.
	var lastPrompt *model.Request
	err := trace.Prompts(context.Background(), f.p.Store, evs, func(ev *store.Event, mc *trace.ModelCall, req *model.Request) error {
		lastPrompt = req
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, m := range lastPrompt.Messages {
		for _, p := range m.Content {
			text.WriteString(p.Text)
			text.Write(p.Input)
		}
	}
	for i := 0; i < 7; i++ {
		id := fmt.Sprintf("ID-%04d", i)
		if !strings.Contains(text.String(), id) {
			t.Fatalf("%s lost from the prompt after compaction", id)
		}
	}
	if rep, err := trace.Verify(context.Background(), f.p.Store, run.ID); err != nil || !rep.OK() {
		t.Fatalf("trace verify after compaction: %+v %v", rep, err)
	}
	if v, err := f.p.Engine.Verify(context.Background(), run.ID); err != nil || v.Events != len(evs) {
		t.Fatalf("replay over the log: %d/%d %v", v.Events, len(evs), err)
	}
}
