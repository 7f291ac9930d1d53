package modeltest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/model"
)

// The suite's checks must catch broken providers, not only pass good ones.
func TestChecksCatchBrokenProviders(t *testing.T) {
	lookup := model.Part{Type: model.PartToolUse, ToolUseID: "a", Name: "lookup_order", Input: json.RawMessage(`{"order_id":"A-1001"}`)}
	usage := model.Usage{InputTokens: 10}
	for _, tc := range []struct {
		name  string
		check func(*model.Response) error
		resp  *model.Response
		want  string
	}{
		{"tool call without tools", textProblem, &model.Response{Content: []model.Part{lookup}, Usage: usage}, "offering no tools"},
		{"no text", textProblem, &model.Response{Usage: usage}, "no text"},
		{"no usage", textProblem, &model.Response{Content: []model.Part{{Type: model.PartText, Text: "pong"}}}, "no input tokens"},
		{"unoffered tool", checkToolResponse, &model.Response{Content: []model.Part{{Type: model.PartToolUse, ToolUseID: "a", Name: "drop_tables", Input: json.RawMessage(`{}`)}}, Usage: usage}, "did not offer"},
		{"malformed call", checkToolResponse, &model.Response{Content: []model.Part{{Type: model.PartToolUse, Name: "lookup_order", Input: json.RawMessage(`{}`)}}, Usage: usage}, "empty id"},
		{"empty answer", checkToolResponse, &model.Response{StopReason: model.StopEndTurn, Usage: usage}, "neither text nor tool calls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.check(tc.resp)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if err := checkToolResponse(&model.Response{Content: []model.Part{lookup}, Usage: usage}); err != nil {
		t.Errorf("good tool answer refused: %v", err)
	}
}

func TestCompleteCatchesRequestMutation(t *testing.T) {
	mutating := model.ProviderFunc(func(_ context.Context, req *model.Request) (*model.Response, error) {
		req.Messages[0].Content[0].Text = "changed"
		return &model.Response{Content: []model.Part{{Type: model.PartText, Text: "ok"}}}, nil
	})
	if _, err := complete(t.Context(), mutating, TextRequest()); err == nil || !strings.Contains(err.Error(), "modified its request") {
		t.Errorf("error = %v, want request-mutation error", err)
	}
	silent := model.ProviderFunc(func(context.Context, *model.Request) (*model.Response, error) { return nil, nil })
	if _, err := complete(t.Context(), silent, TextRequest()); err == nil {
		t.Error("nil response with nil error accepted")
	}
}
