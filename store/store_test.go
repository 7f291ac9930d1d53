package store_test

import (
	"encoding/json"
	"regexp"
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

// CheckTenant accepts exactly the names the pattern it documents matches.
func TestCheckTenant(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$`)
	names := []string{"", "a", "t1", "acme-bank", "a.b_c@d+e-f", ".hidden", "-x", "_x", "@x", "+x", "a/b", "../etc", "a b", "a\n", "\na",
		"é", "aé", "A", "Z9", strings.Repeat("a", 128), strings.Repeat("a", 129), "a\x00", "tenant:1"}
	for c := 0; c < 256; c++ {
		names = append(names, string([]byte{'a', byte(c)}), string([]byte{byte(c)}))
	}
	for _, n := range names {
		if got, want := store.CheckTenant(n) == nil, re.MatchString(n); got != want {
			t.Errorf("CheckTenant(%q) accepts: %v, the pattern: %v", n, got, want)
		}
	}
}
