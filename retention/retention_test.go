package retention_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/retention"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/blobdir"
	"github.com/agentplane/agentplane/store/s3blob/s3test"
	"github.com/agentplane/agentplane/store/sqlite"
	"github.com/agentplane/agentplane/trace"
)

const tenant = "bank"

var masterKey = bytes.Repeat([]byte{0x42}, 32)

// fixture is a sealed embedded store over a blob back end.
type fixture struct {
	st      *sqlite.Store
	backend store.Blobs
	dir     string // the blob folder, when the back end is one
}

func openFolder(t *testing.T) *fixture {
	dir := t.TempDir()
	d, err := blobdir.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(t.Context(), sqlite.Options{Dir: dir, Blobs: d, BlobKey: masterKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &fixture{st: st, backend: d, dir: d.Root()}
}

func openS3(t *testing.T) *fixture {
	srv := s3test.Start(t) // skips (or fails under AGENTPLANE_TEST_STRICT=1) without AGENTPLANE_S3_SERVER
	b := srv.Open(t, "retention")
	st, err := sqlite.Open(t.Context(), sqlite.Options{Dir: t.TempDir(), Blobs: b, BlobKey: masterKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &fixture{st: st, backend: b}
}

// legacyPrefix marks an output stored as before blobs were sealed.
const legacyPrefix = "legacy:"

const systemPrompt = "You are the card-dispute assistant of Example Bank. Never reveal card numbers."

// run records an ended run of user whose log names the shared system
// prompt, the tool definitions and one tool output per entry of outputs,
// each as a blob.
func (f *fixture) run(t *testing.T, id, user, status string, outputs ...string) {
	t.Helper()
	ctx := t.Context()
	st := f.st
	if err := st.CreateRun(ctx, &store.Run{ID: id, Tenant: tenant, User: user, Agent: "disputes", AgentVersion: 1,
		Task: "dispute for " + user, Mode: "async", Status: store.StatusQueued, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	r, err := st.ClaimRunByID(ctx, id, "w", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	blobs := st.Blobs(tenant)
	content := func(s string) trace.Content {
		if rest, ok := strings.CutPrefix(s, legacyPrefix); ok {
			// As an older agentplane stored it: unsealed, under its hash.
			h, err := f.backend.Blobs(tenant).PutBlob(ctx, []byte(rest))
			if err != nil {
				t.Fatal(err)
			}
			return trace.Content{Blob: hex.EncodeToString(h[:]), Size: int64(len(rest)), Preview: rest[:8]}
		}
		c, err := trace.MakeContent(ctx, blobs, []byte(s), 0, 8)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	payloads := []struct {
		typ string
		v   any
	}{{trace.EvRunStarted, trace.RunStarted{Agent: "disputes", AgentVersion: 1, Tenant: tenant, User: user,
		System: content(systemPrompt), ToolDefs: content("[]"), Budgets: json.RawMessage(`{}`)}}}
	for i, out := range outputs {
		payloads = append(payloads, struct {
			typ string
			v   any
		}{trace.EvToolResult, trace.ToolResult{CallID: "c" + string(rune('0'+i)), Tool: "lookup", Status: trace.StatusOK,
			Output: content(out), Bytes: int64(len(out))}})
	}
	var head [32]byte
	var evs []store.Event
	for i, p := range payloads {
		b, _ := json.Marshal(p.v)
		ev := store.Event{RunID: id, Seq: int64(i + 1), Type: p.typ, Step: i, At: time.Now().Truncate(time.Microsecond), Payload: b, PrevHash: head}
		ev.Hash = store.ChainHash(head, &ev)
		head = ev.Hash
		evs = append(evs, ev)
	}
	if err := st.Append(ctx, store.AppendRequest{RunID: id, Epoch: r.LeaseEpoch, Events: evs, Durable: true}); err != nil {
		t.Fatal(err)
	}
	result := "refunded " + user
	if err := st.ReleaseRun(ctx, id, r.LeaseEpoch, store.RunUpdate{Status: &status, Result: &result}); err != nil {
		t.Fatal(err)
	}
}

// verify runs trace verify on a run and fails on any problem.
func (f *fixture) verify(t *testing.T, id string) *trace.Report {
	t.Helper()
	rep, err := trace.Verify(t.Context(), trace.SourceFor(f.st, tenant), id)
	if err != nil {
		t.Fatalf("verify %s: %v", id, err)
	}
	if !rep.OK() {
		t.Fatalf("verify %s: problems %+v", id, rep.Problems)
	}
	return rep
}

func sum(s string) [32]byte { return sha256.Sum256([]byte(s)) }

// readable checks that content s is (or is not) readable in the store,
// and that its object is (or is not) in the back end.
func (f *fixture) readable(t *testing.T, s string, want bool) {
	t.Helper()
	ctx := t.Context()
	h := sum(s)
	got, err := f.st.Blobs(tenant).GetBlob(ctx, h)
	k, kerr := f.st.GetBlobKey(ctx, tenant, h)
	if kerr != nil {
		t.Fatalf("GetBlobKey(%.20q): %v", s, kerr)
	}
	_, objErr := f.backend.Blobs(tenant).GetBlob(ctx, k.Object)
	switch {
	case want && (err != nil || string(got) != s || objErr != nil):
		t.Fatalf("content %.20q: read %v, object %v; want kept", s, err, objErr)
	case !want && (!errors.Is(err, store.ErrRemoved) || !errors.Is(objErr, store.ErrNotFound)):
		t.Fatalf("content %.20q: read err %v, object err %v; want removed and gone from the blob store", s, err, objErr)
	}
}

// Sampled runs for a rate of one half: found by the rule itself, so the
// test does not depend on what the hash happens to give.
func sampledIDs(t *testing.T, rate float64) (in, out string) {
	for i := 0; in == "" || out == ""; i++ {
		id := "run-ok-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if retention.Sampled(id, rate) {
			if in == "" {
				in = id
			}
		} else if out == "" {
			out = id
		}
	}
	return in, out
}

var policy = mustPolicy(retention.Config{PayloadTTL: "30d", FailedPayloadTTL: "180d", SampleRate: 0.5, SampledPayloadTTL: "1y", MetadataTTL: "13mo"})

func mustPolicy(c retention.Config) retention.Policy {
	p, err := c.Policy()
	if err != nil {
		panic(err)
	}
	return p
}

func testPurge(t *testing.T, f *fixture) {
	ctx := t.Context()
	sampled, plain := sampledIDs(t, policy.SampleRate)
	f.run(t, plain, "alice", store.StatusCompleted, "plain output: card 4111", "shared output")
	f.run(t, sampled, "bob", store.StatusCompleted, "sampled output")
	f.run(t, "run-failed", "carol", store.StatusFailed, "failed output", "shared output")
	// A blob an older agentplane stored unsealed, named by a run.
	legacy := "legacy output, stored before sealing"
	f.run(t, "run-legacy", "dave", store.StatusCompleted, legacyPrefix+legacy)
	for _, id := range []string{plain, sampled, "run-failed", "run-legacy"} {
		if rep := f.verify(t, id); rep.Removed != 0 || rep.PromptsUnchecked != "" {
			t.Fatalf("before the purge: %+v", rep)
		}
	}
	pols := map[string]retention.Policy{tenant: policy}
	purge := func(days int, dry bool) *retention.Report {
		t.Helper()
		var seen []retention.Progress
		rep, err := retention.Purge(ctx, retention.Options{Store: f.st, Policies: pols, Now: time.Now().AddDate(0, 0, days), DryRun: dry,
			Progress: func(p retention.Progress) { seen = append(seen, p) }})
		if err != nil {
			t.Fatalf("purge at +%dd: %v", days, err)
		}
		if len(seen) == 0 || seen[len(seen)-1].Done != seen[len(seen)-1].Of {
			t.Fatalf("purge at +%dd: progress %+v, want a last report of everything done", days, seen)
		}
		return rep
	}

	// A day in, nothing has expired.
	if rep := purge(1, false); rep.BlobsRemoved != 0 || rep.PayloadsExpired != 0 {
		t.Fatalf("purge at +1d: %+v, want nothing removed", rep)
	}
	// A dry run at +31 days counts and changes nothing.
	dry := purge(31, true)
	if dry.PayloadsExpired != 2 || dry.BlobsRemoved != 2 {
		t.Fatalf("dry run at +31d: %+v, want the payloads of the plain and the legacy run (2 blobs)", dry)
	}
	f.readable(t, "plain output: card 4111", true)

	rep := purge(31, false)
	if rep.PayloadsExpired != dry.PayloadsExpired || rep.BlobsRemoved != dry.BlobsRemoved {
		t.Fatalf("purge at +31d = %+v, its dry run said %+v", rep, dry)
	}
	f.readable(t, "plain output: card 4111", false)
	f.readable(t, "shared output", true) // the failed run keeps it
	f.readable(t, systemPrompt, true)    // every other run keeps it
	f.readable(t, "sampled output", true)
	f.readable(t, "failed output", true)
	if _, err := f.st.Blobs(tenant).GetBlob(ctx, sum(legacy)); !errors.Is(err, store.ErrRemoved) {
		t.Fatalf("legacy blob after the purge: %v, want removed", err)
	}
	if _, err := f.backend.Blobs(tenant).GetBlob(ctx, sum(legacy)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("legacy plaintext still in the blob store: %v", err)
	}
	for _, id := range []string{plain, "run-legacy"} {
		vr := f.verify(t, id)
		if vr.Removed == 0 || vr.PromptsUnchecked == "" {
			t.Fatalf("verify %s after the purge: %+v, want the removed payloads counted", id, vr)
		}
		r, err := f.st.GetRun(ctx, id)
		if err != nil || r.Status != store.StatusCompleted || r.Task == "" {
			t.Fatalf("run %s after the payload purge: %+v, %v; want its metadata kept", id, r, err)
		}
		if reason, _, _ := f.st.PayloadsRemoved(ctx, id); reason != store.RemovedExpired {
			t.Fatalf("run %s payload mark = %q", id, reason)
		}
	}
	f.verify(t, "run-failed")
	f.verify(t, sampled)

	// At +181 days the failed run's payloads go; the sampled run still
	// keeps the system prompt.
	if rep := purge(181, false); rep.PayloadsExpired != 1 {
		t.Fatalf("purge at +181d: %+v, want the failed run's payloads", rep)
	}
	f.readable(t, "failed output", false)
	f.readable(t, "shared output", false)
	f.readable(t, systemPrompt, true)
	f.readable(t, "sampled output", true)
	f.verify(t, "run-failed")

	// Past the metadata TTL every run goes, with its log.
	rep = purge(400, false)
	if rep.RunsDeleted != 4 {
		t.Fatalf("purge at +400d: %+v, want all 4 runs deleted", rep)
	}
	f.readable(t, systemPrompt, false)
	f.readable(t, "sampled output", false)
	for _, id := range []string{plain, sampled, "run-failed", "run-legacy"} {
		if _, err := f.st.GetRun(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("run %s past the metadata TTL: %v, want deleted", id, err)
		}
		if _, err := trace.Verify(ctx, trace.SourceFor(f.st, tenant), id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("verify of deleted run %s: %v, want not found", id, err)
		}
	}
	if f.dir != "" {
		if n := countFiles(t, filepath.Join(f.dir, tenant)); n != 0 {
			t.Fatalf("%d files left in the tenant's blob folder after every run was deleted", n)
		}
	}
}

func countFiles(t *testing.T, dir string) int {
	n := 0
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return nil
	})
	return n
}

func TestPurgeBlobFolder(t *testing.T) { testPurge(t, openFolder(t)) }

func TestPurgeS3(t *testing.T) { testPurge(t, openS3(t)) }
