package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// TestPastedSecretsRedacted (issue 15, class 9): secrets a user pastes into
// a run's task and into a message are replaced by their placeholder before
// anything is stored: the run, its log, the signal, the blobs and every
// file of the data directory never hold them, the API never returns them,
// and the prompt the model got carries the placeholder.
func TestPastedSecretsRedacted(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()
	// Assembled at run time so that no secret-shaped literal is in the source.
	awsID := "AKIA" + "IOSFODNN7" + "EXAMPLE"
	ghToken := "ghp_" + strings.Repeat("a1B2", 9)
	apiKey := "sk-" + "proj-" + strings.Repeat("Zx9", 8)
	awsSecret := "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
	secrets := []string{awsID, ghToken, apiKey, awsSecret}

	task := demoTask + " If you need the bank's AWS account, the key is " + awsID + " and my GitHub token is " + ghToken + "."
	r := f.do(priya, "POST", "/v1/runs", map[string]any{"agent": demoAgent, "input": task, "mode": "async"})
	if r.status != http.StatusAccepted {
		t.Fatalf("start: %s", r)
	}
	var run api.Run
	r.decode(t, &run)
	f.waitPending(priya, run.ID, "issue_refund")
	msg := "Also use this OpenAI key: " + apiKey + "\nand the secret that goes with the AWS key:\n" + awsSecret + "\n"
	if r := f.do(priya, "POST", "/v1/runs/"+run.ID+"/messages", map[string]any{"text": msg}); r.status != http.StatusAccepted {
		t.Fatalf("message: %s", r)
	}
	var evs []store.Event
	for deadline := time.Now().Add(30 * time.Second); ; {
		var err error
		if evs, err = f.p.Store.Events(ctx, run.ID, 0, 0); err != nil {
			t.Fatal(err)
		}
		if n := len(evs); n > 0 && evs[n-1].Type == trace.EvSignal {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the message was not recorded")
		}
		time.Sleep(10 * time.Millisecond)
	}
	leaks := func(where string, data []byte) {
		t.Helper()
		for _, s := range secrets {
			if bytes.Contains(data, []byte(s)) {
				t.Errorf("%s holds the pasted secret %.8s…", where, s)
			}
		}
	}
	var started trace.RunStarted
	var sig trace.Signal
	for _, ev := range evs {
		leaks("event "+ev.Type, ev.Payload)
		switch ev.Type {
		case trace.EvRunStarted:
			if err := json.Unmarshal(ev.Payload, &started); err != nil {
				t.Fatal(err)
			}
		case trace.EvSignal:
			if err := json.Unmarshal(ev.Payload, &sig); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The model is told something was there.
	for _, want := range []string{"[REDACTED:aws_access_key_id]", "[REDACTED:github_token]", "Ticket T-40127"} {
		if !strings.Contains(started.Task, want) {
			t.Errorf("recorded task %q lacks %q", started.Task, want)
		}
	}
	for _, want := range []string{"[REDACTED:api_key]", "[REDACTED:aws_secret_access_key]"} {
		if !strings.Contains(string(sig.Payload), want) {
			t.Errorf("recorded message %s lacks %q", sig.Payload, want)
		}
	}
	got, err := f.p.Store.GetRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	leaks("the run's task", []byte(got.Task))
	leaks("GET run", f.do(priya, "GET", "/v1/runs/"+run.ID, nil).body)
	leaks("GET events", f.do(priya, "GET", "/v1/runs/"+run.ID+"/events", nil).body)
	prompts := 0
	err = trace.Prompts(ctx, trace.SourceFor(f.p.Store, got.Tenant), evs, func(_ *store.Event, _ *trace.ModelCall, req *model.Request) error {
		prompts++
		var all strings.Builder
		for _, m := range req.Messages {
			for _, p := range m.Content {
				all.WriteString(p.Text)
			}
		}
		leaks("a model request", []byte(all.String()))
		if !strings.Contains(all.String(), "the key is [REDACTED:aws_access_key_id]") {
			t.Errorf("the model was not shown the placeholder")
		}
		return nil
	})
	if err != nil || prompts == 0 {
		t.Fatalf("rebuilt %d prompts: %v", prompts, err)
	}
	// Nothing in the data directory (the database, its WAL, the blobs)
	// holds a pasted secret.
	err = filepath.WalkDir(f.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil // a file removed meanwhile (a temporary blob)
		}
		leaks(path, data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
