// Package modeltest is the conformance suite for model.Provider
// implementations. A provider is done when its tests call Exercise and pass,
// with the race detector on:
//
//	func TestConformance(t *testing.T) {
//		modeltest.Exercise(t, func(t *testing.T) model.Provider { return newProvider(t) })
//	}
//
// The suite makes at most a dozen small calls, so it can run against a real
// vendor API (skip when no key is configured). Its tool requests offer Tools;
// the provider may answer them with text or with calls to those tools, and it
// is asked at most two turns deep (one tool round trip).
package modeltest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/model"
)

// callTimeout bounds each call so that a provider that hangs fails the suite
// instead of stalling it.
const callTimeout = 2 * time.Minute

// Tools are offered by the suite's tool requests.
var Tools = []model.ToolDef{{
	Name:        "lookup_order",
	Description: "Look up an order by its id and return its status.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`),
}}

// TextRequest is the suite's request without tools.
func TextRequest() *model.Request {
	return &model.Request{
		System:    "You are a terse assistant.",
		Messages:  []model.Message{userText("Reply with the single word: pong.")},
		MaxTokens: 64,
	}
}

// ToolRequest is the suite's first request offering Tools.
func ToolRequest() *model.Request {
	return &model.Request{
		System:    "You help customers with orders. Use the tools to look things up.",
		Messages:  []model.Message{userText("What is the status of order A-1001? Use lookup_order.")},
		Tools:     slices.Clone(Tools),
		MaxTokens: 256,
	}
}

func userText(s string) model.Message {
	return model.Message{Role: model.RoleUser, Content: []model.Part{{Type: model.PartText, Text: s}}}
}

// Exercise runs the conformance suite. newProvider is called once per
// subtest and may skip t when the provider cannot be set up.
func Exercise(t *testing.T, newProvider func(t *testing.T) model.Provider) {
	t.Helper()

	t.Run("TextOnly", func(t *testing.T) {
		p := newProvider(t)
		resp, err := complete(t.Context(), p, TextRequest())
		if err != nil {
			t.Fatalf("text-only request failed: %v", err)
		}
		checkText(t, resp)
	})

	t.Run("Tools", func(t *testing.T) {
		p := newProvider(t)
		req := ToolRequest()
		resp, err := complete(t.Context(), p, req)
		if err != nil {
			t.Fatalf("tool request failed: %v", err)
		}
		if err := checkToolResponse(resp); err != nil {
			t.Fatal(err)
		}
		calls := resp.ToolCalls()
		if len(calls) == 0 {
			t.Logf("provider answered the tool request in text: %q", resp.Text())
			return
		}
		// One round trip: send the calls back with results.
		next := followUp(req, resp)
		resp2, err := complete(t.Context(), p, next)
		if err != nil {
			t.Fatalf("request carrying tool results failed: %v", err)
		}
		if err := checkToolResponse(resp2); err != nil {
			t.Fatalf("answer to tool results: %v", err)
		}
	})

	t.Run("CanceledContext", func(t *testing.T) {
		p := newProvider(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		for name, req := range map[string]*model.Request{"text": TextRequest(), "tools": ToolRequest()} {
			resp, err := complete(ctx, p, req)
			if err == nil {
				t.Fatalf("%s request with a canceled context succeeded (response %+v); want an error", name, resp)
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s request with a canceled context: error %q does not wrap context.Canceled", name, err)
			}
			if model.IsRetryable(err) {
				t.Errorf("%s request with a canceled context: error %q is marked retryable", name, err)
			}
		}
	})

	t.Run("CancelDuringCall", func(t *testing.T) {
		p := newProvider(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go func() {
			time.Sleep(time.Millisecond)
			cancel()
		}()
		resp, err := complete(ctx, p, ToolRequest())
		switch {
		case err != nil && !errors.Is(err, context.Canceled):
			t.Errorf("call canceled in flight: error %q does not wrap context.Canceled", err)
		case err == nil:
			// The call finished before the cancellation; it must still be sound.
			if verr := checkToolResponse(resp); verr != nil {
				t.Error(verr)
			}
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		p := newProvider(t)
		const workers, callsEach = 4, 2
		var wg sync.WaitGroup
		errs := make(chan error, workers*callsEach)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for c := range callsEach {
					req, tools := TextRequest(), false
					if (w+c)%2 == 1 {
						req, tools = ToolRequest(), true
					}
					resp, err := complete(t.Context(), p, req)
					if err != nil {
						errs <- fmt.Errorf("worker %d call %d: %w", w, c, err)
						continue
					}
					if tools {
						err = checkToolResponse(resp)
					} else {
						err = textProblem(resp)
					}
					if err != nil {
						errs <- fmt.Errorf("worker %d call %d: %w", w, c, err)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

// complete calls p with a timeout and checks that the provider left req as
// it found it, as model.Provider requires.
func complete(ctx context.Context, p model.Provider, req *model.Request) (*model.Response, error) {
	before, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("modeltest: marshal request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, callErr := p.Complete(ctx, req)
	after, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("modeltest: marshal request: %w", err)
	}
	if string(before) != string(after) {
		return nil, fmt.Errorf("provider modified its request:\nbefore %s\nafter  %s", before, after)
	}
	if callErr == nil && resp == nil {
		return nil, errors.New("provider returned neither a response nor an error")
	}
	return resp, callErr
}

func checkText(t *testing.T, resp *model.Response) {
	t.Helper()
	if err := textProblem(resp); err != nil {
		t.Fatal(err)
	}
}

// textProblem checks the answer to a request without tools.
func textProblem(resp *model.Response) error {
	if err := model.ValidateResponse(resp); err != nil {
		return fmt.Errorf("answer to a text-only request: %w", err)
	}
	if n := len(resp.ToolCalls()); n > 0 {
		return fmt.Errorf("answer to a request offering no tools has %d tool calls", n)
	}
	if resp.Text() == "" {
		return errors.New("answer to a text-only request has no text")
	}
	// Input read from or written to a prompt cache counts: a call whose
	// whole prompt was cached has no uncached input tokens at all.
	if resp.Usage.TotalInput() <= 0 {
		return fmt.Errorf("usage %+v reports no input tokens", resp.Usage)
	}
	return nil
}

// checkToolResponse checks the answer to a request offering Tools.
func checkToolResponse(resp *model.Response) error {
	if err := model.ValidateResponse(resp); err != nil {
		return fmt.Errorf("answer to a tool request: %w", err)
	}
	calls := resp.ToolCalls()
	for _, c := range calls {
		if !slices.ContainsFunc(Tools, func(d model.ToolDef) bool { return d.Name == c.Name }) {
			return fmt.Errorf("tool call %s names a tool the request did not offer", c.Name)
		}
	}
	if len(calls) == 0 && resp.Text() == "" && resp.StopReason == model.StopEndTurn {
		return errors.New("answer to a tool request has neither text nor tool calls")
	}
	// Input read from or written to a prompt cache counts: a call whose
	// whole prompt was cached has no uncached input tokens at all.
	if resp.Usage.TotalInput() <= 0 {
		return fmt.Errorf("usage %+v reports no input tokens", resp.Usage)
	}
	return nil
}

// followUp is req continued with the answer resp and a result for each of
// its tool calls.
func followUp(req *model.Request, resp *model.Response) *model.Request {
	next := *req
	next.Messages = slices.Clone(req.Messages)
	next.Messages = append(next.Messages, model.Message{Role: model.RoleAssistant, Content: slices.Clone(resp.Content)})
	var results []model.Part
	for _, c := range resp.ToolCalls() {
		results = append(results, model.Part{
			Type:      model.PartToolResult,
			ToolUseID: c.ToolUseID,
			Text:      `{"order_id":"A-1001","status":"shipped"}`,
		})
	}
	next.Messages = append(next.Messages, model.Message{Role: model.RoleUser, Content: results})
	return &next
}
