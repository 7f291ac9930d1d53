package api_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/api/apitest"
	"github.com/agentplane/agentplane/apiclient"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
)

const (
	bankTenant  = apitest.BankTenant
	priya       = apitest.Priya
	meera       = apitest.Meera
	otherTenant = apitest.OtherTenant
	gus         = apitest.Gus
	demoAgent   = apitest.DemoAgent
	demoTask    = apitest.DemoTask
)

type fixture struct {
	t     testing.TB
	dir   string
	p     *platform.Platform
	srv   *api.Server
	http  *httptest.Server
	clock *apitest.Clock
	keys  map[string]string // user -> API key with every scope
	// wait bounds waitStatus and waitPending (default 30 s).
	wait time.Duration
}

type fixtureOptions struct {
	config       string
	apiOptions   func(*api.Options)
	platform     func(*platform.Options)
	modelLatency time.Duration
}

// newFixture starts the demo API (see apitest.Start).
func newFixture(t testing.TB, fo fixtureOptions) *fixture {
	t.Helper()
	return fixtureOf(t, apitest.Start(t, fo.apitest()))
}

func (fo fixtureOptions) apitest() apitest.Options {
	return apitest.Options{Config: fo.config, API: fo.apiOptions, Platform: fo.platform, ModelLatency: fo.modelLatency}
}

// fixtureOf drives a started demo API.
func fixtureOf(t testing.TB, s *apitest.Server) *fixture {
	return &fixture{t: t, dir: s.Dir, p: s.Platform, srv: s.API, http: s.HTTP, clock: s.Clock, keys: s.Keys, wait: 30 * time.Second}
}

// response is an HTTP answer read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r *response) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

func (r *response) String() string { return fmt.Sprintf("%d %s", r.status, bytes.TrimSpace(r.body)) }

// do sends a request as user (whose API key is used; "" sends none).
func (f *fixture) do(user, method, path string, body any, hdr ...string) *response {
	f.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			f.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, f.http.URL+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+f.keys[user])
	}
	if body != nil {
		ct := "application/json"
		if str, ok := body.(string); ok && !strings.HasPrefix(strings.TrimSpace(str), "{") {
			ct = "application/yaml"
		}
		req.Header.Set("Content-Type", ct)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: data}
}

// startAsync starts a demo run as user and returns its id.
func (f *fixture) startAsync(user string, hdr ...string) string {
	f.t.Helper()
	r := f.do(user, "POST", "/v1/runs", map[string]any{"agent": demoAgent, "input": demoTask, "mode": "async"}, hdr...)
	if r.status != http.StatusAccepted {
		f.t.Fatalf("POST /v1/runs: %s", r)
	}
	var run api.Run
	r.decode(f.t, &run)
	return run.ID
}

// getRun reads a run as user.
func (f *fixture) getRun(user, id string) api.Run {
	f.t.Helper()
	r := f.do(user, "GET", "/v1/runs/"+id, nil)
	if r.status != http.StatusOK {
		f.t.Fatalf("GET run %s: %s", id, r)
	}
	var run api.Run
	r.decode(f.t, &run)
	return run
}

// replayCompleted replays run id from the step as user and waits for the
// replay to complete; it returns the replay's id.
func (f *fixture) replayCompleted(user, id string, fromStep int) string {
	f.t.Helper()
	r := f.do(user, "POST", "/v1/runs/"+id+":replay", map[string]any{"from_step": fromStep})
	if r.status != http.StatusAccepted {
		f.t.Fatalf("replay: %s", r)
	}
	var rp api.Run
	r.decode(f.t, &rp)
	f.waitStatus(user, rp.ID, store.StatusCompleted)
	return rp.ID
}

// waitStatus polls until the run has one of the statuses.
func (f *fixture) waitStatus(user, id string, statuses ...string) api.Run {
	f.t.Helper()
	deadline := time.Now().Add(f.wait)
	for {
		run := f.getRun(user, id)
		for _, s := range statuses {
			if run.Status == s && (s != store.StatusWaiting || len(run.PendingApprovals) > 0) {
				return run
			}
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("run %s is %s after %v, want %v", id, run.Status, f.wait, statuses)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitPending polls until the run waits for an approval of tool.
func (f *fixture) waitPending(user, id, tool string) api.Approval {
	f.t.Helper()
	deadline := time.Now().Add(f.wait)
	for {
		run := f.getRun(user, id)
		for _, a := range run.PendingApprovals {
			if a.Tool == tool {
				return a
			}
		}
		if store.Terminal(run.Status) || time.Now().After(deadline) {
			f.t.Fatalf("run %s is %s (%s), waiting for %+v; want an approval of %s", id, run.Status, run.Output, run.PendingApprovals, tool)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// decide posts a decision as user and checks it was accepted.
func (f *fixture) decide(user, approvalID string, body map[string]any) {
	f.t.Helper()
	if r := f.do(user, "POST", "/v1/approvals/"+approvalID+":decide", body); r.status != http.StatusAccepted {
		f.t.Fatalf("decide %s as %s: %s", approvalID, user, r)
	}
}

// sseEvent is one message of a stream.
type sseEvent struct {
	id    string
	event string
	data  string
}

// readSSE reads messages until the stream ends or stop returns true. Live
// message.delta frames (no id, not part of the log) are left out; see
// readSSEAll.
func readSSE(t testing.TB, body io.Reader, stop func(sseEvent) bool) []sseEvent {
	t.Helper()
	var out []sseEvent
	readSSEAll(t, body, func(e sseEvent) bool {
		if e.event == api.StreamMessageDelta || e.event == api.StreamRunWaiting {
			return false // not log records
		}
		out = append(out, e)
		return stop != nil && stop(e)
	})
	return out
}

// decodeStream decodes a public stream message's data into out.
func decodeStream(t testing.TB, e sseEvent, out any) api.StreamEvent {
	t.Helper()
	var sev api.StreamEvent
	if err := json.Unmarshal([]byte(e.data), &sev); err != nil {
		t.Fatalf("message %s: %v", e.data, err)
	}
	if sev.V != api.StreamVersion || sev.Type != e.event {
		t.Fatalf("message %s: version %d, type %q under event %q", e.data, sev.V, sev.Type, e.event)
	}
	if err := json.Unmarshal(sev.Data, out); err != nil {
		t.Fatalf("message %s data: %v", e.data, err)
	}
	return sev
}

// readSSEAll is readSSE with every frame, deltas and run.waiting included.
func readSSEAll(t testing.TB, body io.Reader, stop func(sseEvent) bool) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.event != "" || cur.data != "" {
				checkStreamMessage(t, cur)
				out = append(out, cur)
				if stop != nil && stop(cur) {
					return out
				}
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		}
	}
	return out
}

func seqOf(t testing.TB, e sseEvent) int64 {
	t.Helper()
	n, err := strconv.ParseInt(e.id, 10, 64)
	if err != nil {
		t.Fatalf("event %q has id %q", e.event, e.id)
	}
	return n
}

func newClient(s *apitest.Server, token string) *apiclient.Client {
	return apiclient.New(s.HTTP.URL, token)
}

func decide(d string) apiclient.DecideRequest { return apiclient.DecideRequest{Decision: d} }
