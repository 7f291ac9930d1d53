package anthropic_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/model/anthropic"
)

// roundTrip answers every request with one canned response.
type roundTrip struct {
	status int
	ctype  string
	body   string
}

func (rt roundTrip) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: rt.status, Header: http.Header{"Content-Type": {rt.ctype}}, Body: io.NopCloser(strings.NewReader(rt.body)), Request: r}, nil
}

// Whatever the API (or something posing as it) answers, the provider returns
// a response or an error, never panics, and a response it returns can be
// validated.
func FuzzResponseBody(f *testing.F) {
	f.Add(200, false, `{"id":"m","type":"message","role":"assistant","model":"x","content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"t","name":"n","input":{"a":1}}],"stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":2}}`)
	f.Add(529, false, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
	f.Add(200, true, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"content\":[],\"usage\":{\"input_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	f.Add(200, true, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":7}\n\n")
	f.Add(200, false, `{"content":[{"type":"tool_use","input":"not an object"}],"usage":{"input_tokens":-5}}`)
	f.Fuzz(func(t *testing.T, status int, stream bool, body string) {
		if status < 100 || status > 599 {
			status = 200
		}
		ctype := "application/json"
		if stream {
			ctype = "text/event-stream"
		}
		p, err := anthropic.New(anthropic.Options{APIKey: "k", BaseURL: "http://fuzz.invalid", HTTPClient: &http.Client{Transport: roundTrip{status, ctype, body}}})
		if err != nil {
			t.Fatal(err)
		}
		var resp *model.Response
		if stream {
			resp, err = p.CompleteStream(t.Context(), dispute(), func(model.Delta) {})
		} else {
			resp, err = p.Complete(t.Context(), dispute())
		}
		if err == nil && resp == nil {
			t.Fatal("neither a response nor an error")
		}
		if resp != nil {
			_ = model.ValidateResponse(resp)
		}
	})
}
