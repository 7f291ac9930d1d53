package openai_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/model/openai"
)

type roundTrip struct {
	status int
	ctype  string
	body   string
}

func (rt roundTrip) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: rt.status, Header: http.Header{"Content-Type": {rt.ctype}}, Body: io.NopCloser(strings.NewReader(rt.body)), Request: r}, nil
}

// Whatever a compatible server answers, the provider returns a response or
// an error and never panics.
func FuzzResponseBody(f *testing.F) {
	f.Add(200, false, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi","tool_calls":[{"id":"a","type":"function","function":{"name":"n","arguments":"{\"x\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":9}}}`)
	f.Add(200, false, `{"choices":[]}`)
	f.Add(429, false, `{"error":{"message":"slow","type":"requests","code":"rate_limit_exceeded"}}`)
	f.Add(200, true, "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":3,\"function\":{\"arguments\":\"{\"}}]},\"finish_reason\":null}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n")
	f.Add(200, true, "data: {\"error\":{\"type\":\"server_error\"}}\n\n")
	f.Fuzz(func(t *testing.T, status int, stream bool, body string) {
		if status < 100 || status > 599 {
			status = 200
		}
		ctype := "application/json"
		if stream {
			ctype = "text/event-stream"
		}
		p, err := openai.New(openai.Options{APIKey: "k", BaseURL: "http://fuzz.invalid/v1", HTTPClient: &http.Client{Transport: roundTrip{status, ctype, body}}})
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
			if resp.Usage.InputTokens < 0 || resp.Usage.CacheReadTokens < 0 {
				t.Fatalf("negative usage %+v", resp.Usage)
			}
		}
	})
}
