package scripted

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/agentplane/agentplane/model"
)

// Options configures a Provider.
type Options struct {
	// Repeat plays the last turn again for every request past the end of
	// the script, instead of failing: useful to test loop bounds.
	Repeat bool
	// LatencyPerCall delays each answer, honouring cancellation; 0 answers
	// at once.
	LatencyPerCall time.Duration
}

// Provider plays a Script. It keeps no state between calls and is safe for
// concurrent use.
type Provider struct {
	script Script
	opts   Options
}

var _ model.Provider = (*Provider)(nil)

// New returns a provider playing s. It copies s, so later changes to s do not
// affect it. A nil s is a script with no turns. New does not validate s (Parse
// and Load have); an invalid turn makes the call that reaches it fail.
func New(s *Script, opts Options) *Provider {
	p := &Provider{opts: opts}
	if s != nil {
		p.script = Script{Source: s.Source, Final: s.Final, Turns: make([]Turn, len(s.Turns))}
		for i, t := range s.Turns {
			c := t
			c.ToolCalls = make([]ToolCall, len(t.ToolCalls))
			for j, tc := range t.ToolCalls {
				c.ToolCalls[j] = ToolCall{Name: tc.Name, Args: append(json.RawMessage(nil), tc.Args...)}
			}
			if t.Usage != nil {
				u := *t.Usage
				c.Usage = &u
			}
			p.script.Turns[i] = c
		}
	}
	return p
}

// Complete answers req with the script's turn for it:
//
//   - a request offering no tools gets the script's final text, stop reason
//     end_turn and no tool calls, whatever turn it is;
//   - otherwise the turn index is the number of assistant messages in req,
//     and the turn is the one at that index on the path the request's tool
//     results choose through the script's branches. Past the last turn, the last turn is played again if Options.Repeat is
//     set, and otherwise the call fails with a non-retryable *model.Error.
//
// A tool-call argument whose value is the string "$last_handle" becomes the
// newest blob handle ("blob:<sha256>") the request's tool results show, the
// way a real model passes a large result on to another tool.
//
// Tool-use ids are toolu_<turn, two digits>_<index>. Usage is the turn's when
// the script gives it, else estimated with model.EstimateTokens for input and
// model.EstimateContentTokens for output. Everything is deterministic.
func (p *Provider) Complete(ctx context.Context, req *model.Request) (*model.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("scripted model: %w", err)
	}
	if req == nil {
		return nil, p.fail("nil request")
	}
	if d := p.opts.LatencyPerCall; d > 0 {
		timer := time.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("scripted model: %w", ctx.Err())
		case <-timer.C:
		}
	}

	if len(req.Tools) == 0 || req.ForbidToolCalls {
		resp := finalResponse(p.script.finalText(), req)
		return resp, p.check(resp, "final")
	}

	turn := 0
	for _, m := range req.Messages {
		if m.Role == model.RoleAssistant {
			turn++
		}
	}
	if len(p.script.Turns) == 0 {
		return nil, p.fail("script has 0 turns, request asked for turn %d", turn+1)
	}
	st, n, ok := p.script.pick(turn, req)
	if !ok && !p.opts.Repeat {
		return nil, p.fail("script has %d turns, request asked for turn %d", n, turn+1)
	}
	if want := st.ExpectToolResultContains; want != "" {
		if got, ok := lastToolResults(req); !ok || !strings.Contains(got, want) {
			return nil, p.fail("turn %d expects the last user message's tool results to contain %q; they were %q",
				turn+1, want, clipText(got))
		}
	}
	resp := st.response(turn, req)
	if err := fillHandles(resp, req); err != nil {
		return nil, p.fail("turn %d: %w", turn+1, err)
	}
	resp.Model = responseModel(req)
	return resp, p.check(resp, fmt.Sprintf("turn %d", turn+1))
}

// fail builds the provider's non-retryable error; format may use %w.
func (p *Provider) fail(format string, args ...any) error {
	src := ""
	if p.script.Source != "" {
		src = " (" + p.script.Source + ")"
	}
	return &model.Error{Err: fmt.Errorf("scripted model%s: "+format, append([]any{src}, args...)...)}
}

// check refuses to return an answer a real model would be refused for; it
// only fires for scripts built in Go without Validate.
func (p *Provider) check(resp *model.Response, what string) error {
	if err := model.ValidateResponse(resp); err != nil {
		return p.fail("%s: %w", what, err)
	}
	return nil
}

// response builds the answer of turn t played as turn index turn; req may be
// nil (when validating), in which case usage is estimated without input.
func (t Turn) response(turn int, req *model.Request) *model.Response {
	var content []model.Part
	if t.Text != "" {
		content = append(content, model.Part{Type: model.PartText, Text: t.Text})
	}
	for i, c := range t.ToolCalls {
		content = append(content, model.Part{
			Type:      model.PartToolUse,
			ToolUseID: fmt.Sprintf("toolu_%02d_%d", turn, i),
			Name:      c.Name,
			Input:     append(json.RawMessage(nil), c.Args...),
		})
	}
	stop := t.StopReason
	if len(t.ToolCalls) > 0 {
		stop = model.StopToolUse
	} else if stop == "" {
		stop = model.StopEndTurn
	}
	resp := &model.Response{Content: content, StopReason: stop}
	if t.Usage != nil {
		resp.Usage = *t.Usage
	} else {
		resp.Usage = model.Usage{
			InputTokens:  model.EstimateTokens(req),
			OutputTokens: model.EstimateContentTokens(content),
		}
	}
	return resp
}

func finalResponse(text string, req *model.Request) *model.Response {
	content := []model.Part{{Type: model.PartText, Text: text}}
	return &model.Response{
		Model:      responseModel(req),
		Content:    content,
		StopReason: model.StopEndTurn,
		Usage: model.Usage{
			InputTokens:  model.EstimateTokens(req),
			OutputTokens: model.EstimateContentTokens(content),
		},
	}
}

func responseModel(req *model.Request) string {
	if req != nil && req.Model != "" {
		return req.Model
	}
	return "scripted"
}

// lastToolResults joins the tool_result texts of req's last user message;
// ok is false when there is no user message.
func lastToolResults(req *model.Request) (text string, ok bool) {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		if m.Role != model.RoleUser {
			continue
		}
		var b strings.Builder
		for _, p := range m.Content {
			if p.Type == model.PartToolResult {
				if b.Len() > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(p.Text)
			}
		}
		return b.String(), true
	}
	return "", false
}

// LastHandle is the argument value a script writes for the newest handle.
const LastHandle = "$last_handle"

var handleRE = regexp.MustCompile(`^blob:[0-9a-f]{64}$`)

// fillHandles replaces LastHandle in the response's tool-call arguments.
func fillHandles(resp *model.Response, req *model.Request) error {
	quoted := []byte(`"` + LastHandle + `"`)
	for i := range resp.Content {
		in := resp.Content[i].Input
		if resp.Content[i].Type != model.PartToolUse || !bytes.Contains(in, quoted) {
			continue
		}
		h := lastHandle(req)
		if h == "" {
			return fmt.Errorf("%s is used, but no tool result in the request shows a handle", LastHandle)
		}
		resp.Content[i].Input = bytes.ReplaceAll(in, quoted, []byte(`"`+h+`"`))
	}
	return nil
}

// lastHandle finds the newest blob handle in req's tool results: the
// "handle" field of a result the platform cut, never a handle-shaped string
// inside a tool's own output.
func lastHandle(req *model.Request) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		c := req.Messages[i].Content
		for j := len(c) - 1; j >= 0; j-- {
			if c[j].Type != model.PartToolResult {
				continue
			}
			var v struct {
				Handle string `json:"handle"`
			}
			if json.Unmarshal([]byte(c[j].Text), &v) == nil && handleRE.MatchString(v.Handle) {
				return v.Handle
			}
		}
	}
	return ""
}

func clipText(s string) string {
	const max = 200
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
