package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/trace"
)

// runBlobs lists the blobs the platform recorded in a run's log.
func runBlobs(t *testing.T, f *fixture, runID string) []string {
	t.Helper()
	evs, err := f.p.Store.Events(context.Background(), runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := range evs {
		refs, err := trace.BlobRefs(&evs[i])
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range refs {
			out = append(out, c.Blob)
		}
	}
	return out
}

// TestCrossTenantBlobByPlantedHash (issue 15, class 3): tenant B writes
// tenant A's blob hash into its own run — as its whole task, and as a
// message the run records — and asks its run's blob route for it. It must
// get exactly the answer a hash nobody stored gets, while A reads the same
// blob through its own run and B reads its own run's blobs.
func TestCrossTenantBlobByPlantedHash(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()

	// Tenant A's run and one of its blobs (its long instructions).
	defA := strings.ReplaceAll(otherAgentYAML(t, f.dir, "acme-bot", 1), "belongs to its tenant alone", "keeps tenant A's playbook")
	if r := f.do(priya, "POST", "/v1/agents/acme-bot/versions", defA); r.status != http.StatusCreated {
		t.Fatalf("A's agent: %s", r)
	}
	var startedA api.Run
	ra := f.do(priya, "POST", "/v1/runs", map[string]any{"agent": "acme-bot", "input": demoTask, "mode": "async"})
	if ra.status != http.StatusAccepted {
		t.Fatalf("A's run: %s", ra)
	}
	ra.decode(t, &startedA)
	runA := startedA.ID
	f.waitPending(priya, runA, "issue_refund")
	blobsA := runBlobs(t, f, runA)
	if len(blobsA) == 0 {
		t.Fatal("A's run refers to no blob")
	}
	hashA := blobsA[0]
	ownA := f.do(priya, "GET", "/v1/runs/"+runA+"/blobs/"+hashA, nil)
	if ownA.status != http.StatusOK {
		t.Fatalf("A reads its own blob: %s", ownA)
	}

	// Tenant B plants A's hash in its task and in a message.
	if r := f.do(gus, "POST", "/v1/agents/globex-bot/versions", otherAgentYAML(t, f.dir, "globex-bot", 1)); r.status != http.StatusCreated {
		t.Fatalf("B's agent: %s", r)
	}
	var started api.Run
	sr := f.do(gus, "POST", "/v1/runs", map[string]any{"agent": "globex-bot", "input": hashA, "mode": "async"})
	if sr.status != http.StatusAccepted {
		t.Fatalf("B's run: %s", sr)
	}
	sr.decode(t, &started)
	runB := started.ID
	f.waitPending(gus, runB, "issue_refund")
	if r := f.do(gus, "POST", "/v1/runs/"+runB+"/messages", map[string]any{"text": hashA}); r.status != http.StatusAccepted {
		t.Fatalf("B's message: %s", r)
	}
	// Both plants are in B's log as plain JSON strings ("<hash>"), which
	// is what a text search of the log would take for a reference.
	needle := []byte(`"` + hashA + `"`)
	for deadline := time.Now().Add(30 * time.Second); ; {
		evs, err := f.p.Store.Events(ctx, runB, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		planted := 0
		for _, ev := range evs {
			if (ev.Type == trace.EvRunStarted || ev.Type == trace.EvSignal) && bytes.Contains(ev.Payload, needle) {
				planted++
			}
		}
		if planted == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A's hash is in %d of B's events, want the task and the message", planted)
		}
		time.Sleep(10 * time.Millisecond)
	}

	foreign := f.do(gus, "GET", "/v1/runs/"+runB+"/blobs/"+hashA, nil)
	random := sha256.Sum256([]byte("content nobody stored"))
	absent := f.do(gus, "GET", "/v1/runs/"+runB+"/blobs/"+hex.EncodeToString(random[:]), nil)
	if foreign.status != http.StatusNotFound {
		t.Fatalf("B reads A's blob through a planted hash: %d (%d bytes)", foreign.status, len(foreign.body))
	}
	if bytes.Contains(foreign.body, ownA.body[:min(len(ownA.body), 64)]) {
		t.Fatal("B's answer carries A's content")
	}
	if absent.status != foreign.status || !bytes.Equal(absent.body, foreign.body) ||
		absent.header.Get("Content-Type") != foreign.header.Get("Content-Type") ||
		absent.header.Get("Content-Length") != foreign.header.Get("Content-Length") {
		t.Fatalf("B can tell A's content exists: foreign %s %v, absent %s %v", foreign, foreign.header, absent, absent.header)
	}
	// Upper-case hex names the same blob and gets the same answer.
	if r := f.do(gus, "GET", "/v1/runs/"+runB+"/blobs/"+strings.ToUpper(hashA), nil); r.status != absent.status || !bytes.Equal(r.body, absent.body) {
		t.Fatalf("upper-case hash: %s", r)
	}

	// Control: B's own blobs are served (its long instructions).
	blobsB := runBlobs(t, f, runB)
	if len(blobsB) == 0 {
		t.Fatal("B's run refers to no blob")
	}
	for _, h := range blobsB {
		if h == hashA {
			continue // shared content B stored itself would be B's to read
		}
		r := f.do(gus, "GET", "/v1/runs/"+runB+"/blobs/"+h, nil)
		if sum := sha256.Sum256(r.body); r.status != http.StatusOK || hex.EncodeToString(sum[:]) != h {
			t.Fatalf("B reads its own blob %s: %d", h[:12], r.status)
		}
	}
}
