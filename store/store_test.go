package store_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// PromptHashOf reads the prompt hash of a model call's payload as
// json.Unmarshal into a struct of that one field would, without decoding
// the response.
func TestPromptHashOf(t *testing.T) {
	h := strings.Repeat("0f", 32)
	recorded, err := json.Marshal(trace.ModelCall{Alias: "default", Delta: []int64{1, 2}, PromptHash: "sha256:" + h, PromptBytes: 10,
		Response: &model.Response{Content: []model.Part{{Type: model.PartText, Text: `a "prompt_hash": "` + strings.Repeat("aa", 32) + `"`}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, typ, payload, want string
	}{
		{"recorded", store.EventModelCall, string(recorded), h},
		{"bare hex", store.EventModelCall, `{"prompt_hash":"` + h + `"}`, h},
		{"another event", "tool_result", `{"prompt_hash":"` + h + `"}`, ""},
		{"not a sha256", store.EventModelCall, `{"prompt_hash":"sha256:abc"}`, ""},
		{"upper-case hex", store.EventModelCall, `{"prompt_hash":"` + strings.ToUpper(h) + `"}`, ""},
		{"invalid JSON after the hash", store.EventModelCall, `{"prompt_hash":"` + h + `","response":{]}`, ""},
		{"a later member of the wrong type", store.EventModelCall, `{"prompt_hash":"` + h + `","Prompt_Hash":5}`, ""},
		{"the last duplicate", store.EventModelCall, `{"prompt_hash":"` + strings.Repeat("aa", 32) + `","PROMPT_HASH":"` + h + `"}`, h},
		{"an escaped name", store.EventModelCall, `{"prompt\u005fhash":"` + h + `"}`, h},
		{"nested only", store.EventModelCall, `{"response":{"prompt_hash":"` + h + `"}}`, ""},
		{"null", store.EventModelCall, `null`, ""},
	} {
		if got := store.PromptHashOf(&store.Event{Type: tc.typ, Payload: []byte(tc.payload)}); got != tc.want {
			t.Errorf("%s: PromptHashOf = %q, want %q", tc.name, got, tc.want)
		}
	}
}
