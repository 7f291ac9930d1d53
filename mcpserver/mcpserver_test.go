package mcpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/api/apitest"
	"github.com/agentplane/agentplane/mcpserver"
	"github.com/agentplane/agentplane/store"
)

// demo is the card-dispute API with the MCP server mounted at /mcp.
func demo(t testing.TB) *apitest.Server {
	t.Helper()
	return apitest.Start(t, apitest.Options{API: func(o *api.Options) {
		o.MCP = mcpserver.Mount(mcpserver.Options{})
	}})
}

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// connect returns a client session of token's principal over transport
// (http: Streamable HTTP at /mcp; stdio: newline-delimited JSON over a
// pair of pipes, as `agentplane mcp serve --stdio` speaks on its stdin
// and stdout).
func connect(t testing.TB, s *apitest.Server, transport, token string) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	var tr mcp.Transport
	switch transport {
	case "http":
		tr = &mcp.StreamableClientTransport{Endpoint: s.HTTP.URL + api.MCPPath,
			HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}, Timeout: 30 * time.Second}}
	case "stdio":
		m, err := mcpserver.New(mcpserver.Options{API: s.API})
		if err != nil {
			t.Fatal(err)
		}
		clientR, serverW := io.Pipe()
		serverR, clientW := io.Pipe()
		done := make(chan error, 1)
		sctx, cancel := context.WithCancel(ctx)
		go func() { done <- m.ServeStdio(sctx, token, serverR, serverW) }()
		t.Cleanup(func() {
			cancel()
			clientW.Close()
			serverW.Close()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("ServeStdio: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("ServeStdio did not return 10s after its input closed")
			}
		})
		tr = &mcp.IOTransport{Reader: clientR, Writer: clientW}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect over %s: %v", transport, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and returns its result; a protocol error fails.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

// ok calls a tool that must succeed and decodes its structured result.
func ok[T any](t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) T {
	t.Helper()
	res := call(t, cs, tool, args)
	if res.IsError {
		t.Fatalf("%s(%v): tool error %s", tool, args, text(res))
	}
	var out T
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: structured content %s: %v", tool, b, err)
	}
	return out
}

// refused calls a tool that must fail with a tool error containing want.
func refused(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, want string) {
	t.Helper()
	res := call(t, cs, tool, args)
	if !res.IsError || !strings.Contains(text(res), want) {
		t.Fatalf("%s(%v): got error=%v %q, want a tool error containing %q", tool, args, res.IsError, text(res), want)
	}
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// waitRun polls get_run until the run has ended or waits for an approval
// that is not one of decided.
func waitRun(t *testing.T, cs *mcp.ClientSession, id string, decided map[string]bool) api.Run {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		run := ok[api.Run](t, cs, "get_run", map[string]any{"run_id": id})
		if store.Terminal(run.Status) {
			return run
		}
		for _, a := range run.PendingApprovals {
			if run.Status == store.StatusWaiting && !decided[a.ID] {
				return run
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %s after 60s", id, run.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var wantTools = []string{"cancel_run", "decide_approval", "get_run", "list_approvals", "list_run_events", "replay_run", "send_message", "start_run", "trace_run"}

// TestMCPServer drives the demo over each transport as three principals:
// the support agent who starts the run, the supervisor who approves it,
// and another tenant's supervisor, who can neither see nor decide it.
func TestMCPServer(t *testing.T) {
	for _, transport := range []string{"http", "stdio"} {
		t.Run(transport, func(t *testing.T) {
			s := demo(t)
			priya := connect(t, s, transport, s.Keys[apitest.Priya])
			meera := connect(t, s, transport, s.Keys[apitest.Meera])
			gus := connect(t, s, transport, s.Keys[apitest.Gus])

			lt, err := priya.ListTools(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range lt.Tools {
				names = append(names, tl.Name)
				if tl.OutputSchema == nil || tl.InputSchema == nil {
					t.Errorf("tool %s: input schema %v, output schema %v; want both", tl.Name, tl.InputSchema != nil, tl.OutputSchema != nil)
				}
			}
			if strings.Join(names, ",") != strings.Join(wantTools, ",") {
				t.Fatalf("tools %v, want %v", names, wantTools)
			}

			// Bad input gets a tool error the caller can correct.
			refused(t, priya, "get_run", map[string]any{}, "run_id")
			refused(t, priya, "start_run", map[string]any{"agent": apitest.DemoAgent, "input": "x", "mode": "stream"}, "mode")
			refused(t, priya, "list_run_events", map[string]any{"run_id": "run_x", "limit": 1000}, "limit must be between 1 and 200")
			refused(t, priya, "start_run", map[string]any{"agent": apitest.DemoAgent, "input": "  "}, "input is required")
			refused(t, priya, "start_run", map[string]any{"agent": "no-such-agent", "input": "hello"}, "not_found")

			started := ok[mcpserver.StartRunResult](t, priya, "start_run", map[string]any{"agent": apitest.DemoAgent,
				"version": "prod", "input": apitest.DemoTask, "idempotency_key": "ticket-T-40127"})
			id := started.Run.ID
			if started.Run.Tenant != apitest.BankTenant || started.Run.User != apitest.Priya || started.Replayed {
				t.Fatalf("started %+v, want a new run of %s for %s", started.Run, apitest.BankTenant, apitest.Priya)
			}
			again := ok[mcpserver.StartRunResult](t, priya, "start_run", map[string]any{"agent": apitest.DemoAgent,
				"version": "prod", "input": apitest.DemoTask, "idempotency_key": "ticket-T-40127"})
			if again.Run.ID != id || !again.Replayed {
				t.Fatalf("retry with the same idempotency key: %+v, want run %s replayed", again, id)
			}

			run := waitRun(t, priya, id, nil)
			if run.Status != store.StatusWaiting {
				t.Fatalf("run %s is %s (%s), want waiting for an approval", id, run.Status, run.Output)
			}
			approval := run.PendingApprovals[0].ID

			// Another tenant sees nothing of it and cannot decide it.
			for tool, args := range map[string]map[string]any{
				"get_run":         {"run_id": id},
				"list_run_events": {"run_id": id},
				"trace_run":       {"run_id": id},
				"replay_run":      {"run_id": id, "from_step": 1},
				"decide_approval": {"approval_id": approval, "decision": "approve"},
			} {
				refused(t, gus, tool, args, "not_found")
			}
			if l := ok[mcpserver.ApprovalsResult](t, gus, "list_approvals", nil); len(l.Approvals) != 0 {
				t.Fatalf("globex lists %d approvals of the bank", len(l.Approvals))
			}
			// The run's own user is not an approver of its group.
			refused(t, priya, "decide_approval", map[string]any{"approval_id": approval, "decision": "approve"}, "not_approver")
			if l := ok[mcpserver.ApprovalsResult](t, priya, "list_approvals", map[string]any{"decidable": true}); len(l.Approvals) != 0 {
				t.Fatalf("priya's inbox holds %d approvals; she is in no approving group", len(l.Approvals))
			}
			refused(t, meera, "decide_approval", map[string]any{"approval_id": approval, "decision": "maybe"}, "decision must be approve, reject or edit")

			// The supervisor decides every approval from her inbox until
			// the run ends.
			decided := map[string]bool{}
			for {
				run = waitRun(t, meera, id, decided)
				if store.Terminal(run.Status) {
					break
				}
				if len(decided) > 5 {
					t.Fatalf("run %s still waits after %d decisions", id, len(decided))
				}
				var next string
				for _, a := range ok[mcpserver.ApprovalsResult](t, meera, "list_approvals", map[string]any{"decidable": true}).Approvals {
					if a.RunID == id && !decided[a.ID] {
						next = a.ID
					}
				}
				if next == "" {
					t.Fatalf("meera's inbox lacks the approval run %s waits for: %+v", id, run.PendingApprovals)
				}
				a := ok[api.DecisionAccepted](t, meera, "decide_approval", map[string]any{"approval_id": next,
					"decision": "approve", "comment": "checked the statement"})
				if a.Decider != apitest.Meera || a.RunID != id {
					t.Fatalf("decision %+v", a)
				}
				decided[a.ApprovalID] = true
				refused(t, meera, "decide_approval", map[string]any{"approval_id": next, "decision": "approve"}, "approval_not_pending")
			}
			if run.Status != store.StatusCompleted {
				t.Fatalf("run %s ended %s: %s", id, run.Status, run.Output)
			}

			// The log in bounded pages, and its verification.
			var seqs []int64
			after := int64(0)
			for pages := 0; ; pages++ {
				page := ok[mcpserver.EventPage](t, priya, "list_run_events", map[string]any{"run_id": id, "after": after, "limit": 4})
				if len(page.Events) > 4 || page.Status != store.StatusCompleted {
					t.Fatalf("page of %d events, status %s", len(page.Events), page.Status)
				}
				for _, ev := range page.Events {
					seqs = append(seqs, ev.Seq)
				}
				after = page.NextAfter
				if !page.More {
					break
				}
			}
			for i, seq := range seqs {
				if seq != int64(i+1) {
					t.Fatalf("paged events %v: want 1..%d without gaps", seqs, len(seqs))
				}
			}
			if int64(len(seqs)) != run.LastEventID {
				t.Fatalf("paged %d events, the run's last event is %d", len(seqs), run.LastEventID)
			}
			tr := ok[mcpserver.TraceResult](t, priya, "trace_run", map[string]any{"run_id": id})
			if !tr.OK || tr.Events != len(seqs) || tr.Prompts == 0 || len(tr.HeadHash) != 64 {
				t.Fatalf("trace_run: %+v", tr)
			}

			// A replay from step 2 is a new run of the same tenant and user.
			rep := ok[api.Run](t, priya, "replay_run", map[string]any{"run_id": id, "from_step": 2})
			if rep.ID == id || rep.ParentRunID != "" && rep.ParentRunID != id || rep.Tenant != apitest.BankTenant {
				t.Fatalf("replay: %+v", rep)
			}
			refused(t, priya, "replay_run", map[string]any{"run_id": id, "from_step": 0}, "from-step")
			refused(t, priya, "send_message", map[string]any{"run_id": id, "text": "one more thing"}, "has ended")

			// A second run: another tenant can neither message nor cancel
			// it; its user does both, and it ends cancelled.
			second := ok[mcpserver.StartRunResult](t, priya, "start_run", map[string]any{"agent": apitest.DemoAgent, "input": apitest.DemoTask}).Run.ID
			refused(t, gus, "send_message", map[string]any{"run_id": second, "text": "refund everything"}, "not_found")
			refused(t, gus, "cancel_run", map[string]any{"run_id": second}, "not_found")
			refused(t, priya, "send_message", map[string]any{"run_id": second, "text": " "}, "text is required")
			if a := ok[api.SignalAccepted](t, priya, "send_message", map[string]any{"run_id": second, "text": "the customer called again"}); a.Kind != "message" {
				t.Fatalf("send_message: %+v", a)
			}
			if a := ok[api.SignalAccepted](t, priya, "cancel_run", map[string]any{"run_id": second, "reason": "duplicate ticket"}); a.Kind != "cancel" {
				t.Fatalf("cancel_run: %+v", a)
			}
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				r := ok[api.Run](t, priya, "get_run", map[string]any{"run_id": second})
				if r.Status == store.StatusCancelled {
					break
				}
				if store.Terminal(r.Status) || time.Now().After(deadline) {
					t.Fatalf("cancelled run %s is %s", second, r.Status)
				}
			}
		})
	}
}

// TestMCPHTTPAuth: /mcp answers 401 with a clear message without a valid
// key, and a tool the key has no scope for is refused.
func TestMCPHTTPAuth(t *testing.T) {
	s := demo(t)
	for _, auth := range []string{"", "Bearer ap_nokey_nosecret", "Basic dXNlcjpwYXNz"} {
		req, _ := http.NewRequest("POST", s.HTTP.URL+api.MCPPath, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "Authorization: Bearer") ||
			resp.Header.Get("WWW-Authenticate") == "" {
			t.Fatalf("Authorization %q: %d %s, want 401 naming the Bearer key", auth, resp.StatusCode, body)
		}
	}

	readOnly := s.NewKey(t, apitest.BankTenant, apitest.Meera, []string{api.ScopeRunsRead})
	cs := connect(t, s, "http", readOnly)
	refused(t, cs, "start_run", map[string]any{"agent": apitest.DemoAgent, "input": apitest.DemoTask}, "lacks the scope runs:write")
	refused(t, cs, "decide_approval", map[string]any{"approval_id": "apr_x", "decision": "approve"}, "lacks the scope approvals:decide")
	if l := ok[mcpserver.ApprovalsResult](t, cs, "list_approvals", nil); l.Approvals == nil {
		t.Fatal("list_approvals: approvals is null, want a list")
	}
}

// TestMCPStdioKey: stdio refuses to start with a key that is not valid,
// and a key revoked while a client holds the server open acts no more.
func TestMCPStdioKey(t *testing.T) {
	s := demo(t)
	m, err := mcpserver.New(mcpserver.Options{API: s.API})
	if err != nil {
		t.Fatal(err)
	}
	r, w := io.Pipe()
	defer r.Close()
	if err := m.ServeStdio(context.Background(), "ap_nokey_nosecret", r, w); !errors.Is(err, api.ErrUnauthenticated) {
		t.Fatalf("ServeStdio with an unknown key: %v, want api.ErrUnauthenticated", err)
	}

	key := s.NewKey(t, apitest.BankTenant, apitest.Priya, nil)
	cs := connect(t, s, "stdio", key)
	if l := ok[mcpserver.ApprovalsResult](t, cs, "list_approvals", nil); l.Approvals == nil {
		t.Fatal("list_approvals before the revocation: approvals is null")
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(key, "ap_"), "_")
	st, okStore := any(s.Platform.Store).(store.APIStore)
	if !okStore {
		t.Fatal("the platform's store keeps no API keys")
	}
	if err := st.RevokeAPIKey(context.Background(), id, time.Now()); err != nil {
		t.Fatal(err)
	}
	refused(t, cs, "list_approvals", nil, "unauthenticated: the key this server was started with is no longer valid")
	refused(t, cs, "start_run", map[string]any{"agent": apitest.DemoAgent, "input": apitest.DemoTask}, "unauthenticated")
}
