package cli_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api/apitest"
	"github.com/agentplane/agentplane/apiclient"
	"github.com/agentplane/agentplane/internal/cli"
)

// agentplane runs the CLI as user against the server (client mode).
func agentplane(t *testing.T, s *apitest.Server, user string, args ...string) (string, string, int) {
	t.Helper()
	t.Setenv(cli.EnvServer, s.HTTP.URL)
	t.Setenv(cli.EnvToken, s.Keys[user])
	t.Setenv("AGENTPLANE_DATA", t.TempDir()) // client mode must not need it
	var out, errb bytes.Buffer
	code := cli.Main(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

// waitApproval waits until the run waits for an approval of tool.
func waitApproval(t *testing.T, cl *apiclient.Client, runID, tool string) string {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		r, err := cl.GetRun(context.Background(), runID)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range r.PendingApprovals {
			if a.Tool == tool {
				return a.ID
			}
		}
	}
	t.Fatalf("run %s never waited for %s", runID, tool)
	return ""
}

// TestClientMode drives the CLI as an HTTP client: run (detached and
// streamed), approvals, approve (refused for the requester), runs, trace and
// trace verify (over the server's events and blobs), message and cancel.
func TestClientMode(t *testing.T) {
	s := apitest.Start(t, apitest.Options{})
	asPriya := apiclient.New(s.HTTP.URL, s.Keys[apitest.Priya])

	out, stderr, code := agentplane(t, s, apitest.Priya, "run", apitest.DemoAgent, "--task", apitest.DemoTask, "--detach")
	runID := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(runID, "run_") {
		t.Fatalf("run --detach: %d %q %s", code, out, stderr)
	}
	apID := waitApproval(t, asPriya, runID, "issue_refund")
	out, _, code = agentplane(t, s, apitest.Meera, "approvals")
	if code != 0 || !strings.Contains(out, apID) || !strings.Contains(out, "card-ops-supervisors") {
		t.Fatalf("approvals: %d\n%s", code, out)
	}
	_, stderr, code = agentplane(t, s, apitest.Priya, "approve", apID)
	if code == 0 || !strings.Contains(stderr, "not_approver") {
		t.Fatalf("the requester approving: %d %s", code, stderr)
	}
	if _, stderr, code = agentplane(t, s, apitest.Meera, "approve", apID, "--as", "someone"); code != 2 {
		t.Fatalf("--as in client mode: %d %s", code, stderr)
	}
	if out, stderr, code = agentplane(t, s, apitest.Meera, "approve", apID, "--comment", "statement checked"); code != 0 || !strings.Contains(out, "approve by "+apitest.Meera) {
		t.Fatalf("approve: %d %s %s", code, out, stderr)
	}
	emailID := waitApproval(t, asPriya, runID, "send_email")
	if _, stderr, code = agentplane(t, s, apitest.Meera, "approve", emailID); code != 0 {
		t.Fatalf("approve the email: %d %s", code, stderr)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, _, _ = agentplane(t, s, apitest.Priya, "runs", "--status", "completed")
		if strings.Contains(out, runID) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs: %s", out)
		}
	}
	out, stderr, code = agentplane(t, s, apitest.Priya, "trace", runID)
	if code != 0 || !strings.Contains(out, "prompt for step 1") || !strings.Contains(out, "matches the recorded hash") || strings.Contains(out, "DOES NOT MATCH") {
		t.Fatalf("trace: %d %s\n%s", code, stderr, out)
	}
	out, stderr, code = agentplane(t, s, apitest.Priya, "trace", "verify", runID)
	if code != 0 || !strings.HasPrefix(out, "ok: run "+runID) {
		t.Fatalf("trace verify: %d %s %s", code, out, stderr)
	}
	if _, stderr, code = agentplane(t, s, apitest.Gus, "trace", runID); code == 0 || !strings.Contains(stderr, "404") {
		t.Fatalf("another tenant's trace: %d %s", code, stderr)
	}

	// A streamed run prints its timeline while a supervisor approves.
	t.Setenv(cli.EnvToken, s.Keys[apitest.Priya])
	done := make(chan struct{})
	var streamOut string
	var streamCode int
	go func() {
		defer close(done)
		var o, e bytes.Buffer
		streamCode = cli.Main(context.Background(), []string{"run", apitest.DemoAgent, "--task", apitest.DemoTask}, &o, &e)
		streamOut = o.String() + e.String()
	}()
	asMeera := apiclient.New(s.HTTP.URL, s.Keys[apitest.Meera])
	var streamed string
	for deadline := time.Now().Add(20 * time.Second); streamed == ""; time.Sleep(10 * time.Millisecond) {
		rs, err := asPriya.ListRuns(context.Background(), apiclient.ListRunsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Mode == "stream" {
				streamed = r.ID
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no streamed run")
		}
	}
	for _, tool := range []string{"issue_refund", "send_email"} {
		if _, err := asMeera.Decide(context.Background(), waitApproval(t, asPriya, streamed, tool), apiclient.DecideRequest{Decision: "approve"}); err != nil {
			t.Fatal(err)
		}
	}
	<-done
	if streamCode != 0 || !strings.Contains(streamOut, "waits for approval apr_"+streamed) || !strings.Contains(streamOut, "end     completed") {
		t.Fatalf("streamed run: %d\n%s", streamCode, streamOut)
	}

	// message and cancel.
	out, _, _ = agentplane(t, s, apitest.Priya, "run", apitest.DemoAgent, "--task", apitest.DemoTask, "--detach")
	third := strings.TrimSpace(out)
	waitApproval(t, asPriya, third, "issue_refund")
	if out, stderr, code = agentplane(t, s, apitest.Priya, "message", third, "--text", "she booked once"); code != 0 {
		t.Fatalf("message: %d %s %s", code, out, stderr)
	}
	if out, stderr, code = agentplane(t, s, apitest.Priya, "cancel", third, "--reason", "duplicate ticket"); code != 0 {
		t.Fatalf("cancel: %d %s %s", code, out, stderr)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r, err := asPriya.GetRun(context.Background(), third)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status == "cancelled" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %s after cancel", third, r.Status)
		}
	}
}
