package retention_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/retention"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/blobcrypt"
	"github.com/agentplane/agentplane/trace"
)

func testEraseUser(t *testing.T, f *fixture) {
	ctx := t.Context()
	f.run(t, "run-alice-1", "alice", store.StatusCompleted, "alice's card 4111 1111 1111 1111", "alice's address: 12 MG Road")
	f.run(t, "run-alice-2", "alice", store.StatusFailed, "alice's address: 12 MG Road")
	f.run(t, "run-bob", "bob", store.StatusCompleted, "bob's statement")
	f.run(t, "run-old-alice", "alice", store.StatusCompleted, legacyPrefix+"alice, stored before sealing")
	backup := f.backup(t)

	now := time.Now().UTC()
	rep, err := retention.Erase(ctx, f.st, retention.EraseRequest{Tenant: tenant, User: "alice", RequestedBy: "dpo@bank", Reason: "erasure request #81"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Erasures) != 3 || rep.BlobsRemoved != 3 {
		t.Fatalf("erase alice: %d erasures, %d blobs removed; want 3 runs and their 3 own blobs", len(rep.Erasures), rep.BlobsRemoved)
	}
	for _, id := range []string{"run-alice-1", "run-alice-2", "run-old-alice"} {
		vr := f.verify(t, id)
		if vr.Erased == 0 || len(vr.Erasures) != 1 || vr.Erasures[0].User != "alice" || vr.Erasures[0].RequestedBy != "dpo@bank" {
			t.Fatalf("verify %s after the erasure: %+v, want every event erased and the erasure record", id, vr)
		}
		evs, _ := f.st.Events(ctx, id, 0, 0)
		for _, ev := range evs {
			if bytes.Contains(ev.Payload, []byte("alice")) || trace.ErasureOf(&ev) != vr.Erasures[0].ID {
				t.Fatalf("%s seq %d still holds %s", id, ev.Seq, ev.Payload)
			}
		}
		r, err := f.st.GetRun(ctx, id)
		if err != nil || r.Task != "" || r.Result != "" || r.User != "alice" || r.LastSeq == 0 {
			t.Fatalf("erased run row %+v (%v): want task and result gone, the rest kept", r, err)
		}
		// An erased log is never acted on again (resume, replay, copy).
		if err := trace.CheckLog(ctx, f.st.Blobs(tenant), evs); !errors.Is(err, trace.ErrDamaged) {
			t.Fatalf("CheckLog(erased run) = %v, want refused", err)
		}
	}
	f.readable(t, "alice's card 4111 1111 1111 1111", false)
	f.readable(t, "alice's address: 12 MG Road", false)
	if _, err := f.st.Blobs(tenant).GetBlob(ctx, sum("alice, stored before sealing")); !errors.Is(err, store.ErrRemoved) {
		t.Fatalf("alice's legacy blob: %v, want erased", err)
	}
	f.readable(t, systemPrompt, true) // bob's run keeps it
	f.readable(t, "bob's statement", true)
	if vr := f.verify(t, "run-bob"); vr.Erased != 0 || vr.Removed != 0 {
		t.Fatalf("bob's run after alice's erasure: %+v", vr)
	}

	// The backup taken before the erasure, restored, opens for nobody:
	// the keys are gone, and what it holds is ciphertext.
	f.restore(t, backup)
	for _, s := range []string{"alice's card 4111 1111 1111 1111", "alice's address: 12 MG Road"} {
		if _, err := f.st.Blobs(tenant).GetBlob(ctx, sum(s)); !errors.Is(err, store.ErrRemoved) {
			t.Fatalf("%q after restoring the backup: %v, want still erased", s, err)
		}
	}
	for name, data := range backup {
		if bytes.Contains(data, []byte("alice's")) || bytes.Contains(data, []byte("4111")) {
			if strings.Contains(string(data), "stored before sealing") {
				continue // the legacy blob was plaintext in the backup: sealing began after it
			}
			t.Fatalf("backup file %s holds plaintext", name)
		}
	}
	// Even with the master key, a sealed object of the backup does not
	// open: its data key was the one thing that could open it.
	s, err := blobcrypt.New(blobcrypt.Options{Backend: f.backend, Keys: f.st, MasterKey: masterKey})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Blobs(tenant).GetBlob(ctx, sum("alice's card 4111 1111 1111 1111")); !errors.Is(err, store.ErrRemoved) {
		t.Fatalf("with the master key: %v, want erased", err)
	}

	// Refusals: a run of another tenant is not found; an open run is refused.
	if _, err := retention.Erase(ctx, f.st, retention.EraseRequest{Tenant: "other", RunID: "run-bob"}, now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("erase another tenant's run: %v, want not found", err)
	}
	if _, err := retention.Erase(ctx, f.st, retention.EraseRequest{Tenant: tenant}, now); !errors.Is(err, retention.ErrBadRequest) {
		t.Fatalf("erase nothing named: %v", err)
	}
	if err := f.st.CreateRun(ctx, &store.Run{ID: "run-bob-live", Tenant: tenant, User: "bob", Agent: "disputes", AgentVersion: 1, Mode: "async", Status: store.StatusQueued, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := retention.Erase(ctx, f.st, retention.EraseRequest{Tenant: tenant, User: "bob"}, now); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "run-bob-live") {
		t.Fatalf("erase bob with an open run: %v, want refused naming it", err)
	}
	f.readable(t, "bob's statement", true)

	// One run: bob's.
	rep, err = retention.Erase(ctx, f.st, retention.EraseRequest{Tenant: tenant, RunID: "run-bob", RequestedBy: "admin"}, now)
	if err != nil || len(rep.Erasures) != 1 {
		t.Fatalf("erase run-bob: %+v, %v", rep, err)
	}
	f.readable(t, "bob's statement", false)
	f.verify(t, "run-bob")
}

// backup copies every object the back end holds for the tenant.
func (f *fixture) backup(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	if f.dir == "" {
		return out
	}
	root := filepath.Join(f.dir, tenant)
	filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(root, p)
			out[rel] = data
		}
		return nil
	})
	if len(out) == 0 {
		t.Fatal("the backup is empty")
	}
	return out
}

// restore writes a backup back into the blob folder.
func (f *fixture) restore(t *testing.T, b map[string][]byte) {
	t.Helper()
	for rel, data := range b {
		p := filepath.Join(f.dir, tenant, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEraseBlobFolder(t *testing.T) { testEraseUser(t, openFolder(t)) }

func TestEraseS3(t *testing.T) { testEraseUser(t, openS3(t)) }

func TestPolicyValidation(t *testing.T) {
	for _, tc := range []struct {
		c    retention.Config
		want string // "" = valid
	}{
		{retention.Config{}, ""},
		{retention.Config{PayloadTTL: "30d", MetadataTTL: "13mo"}, ""},
		{retention.Config{PayloadTTL: "30d", FailedPayloadTTL: "26w", SampleRate: 0.01, SampledPayloadTTL: "1y", MetadataTTL: "13mo"}, ""},
		{retention.Config{PayloadTTL: "30"}, "want a whole number and a unit"},
		{retention.Config{PayloadTTL: "0d"}, "zero"},
		{retention.Config{PayloadTTL: "30d", FailedPayloadTTL: "7d"}, "failed_payload_ttl 7d is shorter than payload_ttl 30d"},
		{retention.Config{PayloadTTL: "30d", SampleRate: 1.5}, "between 0 and 1"},
		{retention.Config{SampleRate: 0.1}, "sample_rate without payload_ttl"},
		{retention.Config{PayloadTTL: "2y", MetadataTTL: "13mo"}, "payload_ttl 2y outlives metadata_ttl 13mo"},
		{retention.Config{PayloadTTL: "30d", SampleRate: 0.1, SampledPayloadTTL: "7d"}, "sampled_payload_ttl 7d is shorter"},
	} {
		_, err := tc.c.Policy()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: err = %v, want %q", tc.c, err, tc.want)
		}
	}
}

func TestSampledIsDeterministicAndFair(t *testing.T) {
	n := 0
	for i := range 10000 {
		id := "run_" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + time.Duration(i).String()
		first, again := retention.Sampled(id, 0.1), retention.Sampled(id, 0.1)
		if first != again {
			t.Fatal("Sampled is not deterministic")
		}
		if first {
			n++
		}
	}
	if n < 800 || n > 1200 {
		t.Fatalf("Sampled(0.1) kept %d of 10000", n)
	}
	if retention.Sampled("x", 0) || !retention.Sampled("x", 1) {
		t.Fatal("rates 0 and 1")
	}
}

func TestDecide(t *testing.T) {
	ended := time.Date(2026, 1, 31, 12, 0, 0, 0, time.UTC)
	p := mustPolicy(retention.Config{PayloadTTL: "1mo", FailedPayloadTTL: "6mo", MetadataTTL: "13mo"})
	r := &store.Run{ID: "r", Status: store.StatusCompleted, UpdatedAt: ended}
	d := p.Decide(r, ended.AddDate(0, 1, 0).Add(-time.Second))
	if d.ExpirePayloads || d.PayloadsUntil != time.Date(2026, 3, 3, 12, 0, 0, 0, time.UTC) {
		t.Fatalf("a second before a month: %+v", d)
	}
	if d := p.Decide(r, ended.AddDate(0, 1, 0)); !d.ExpirePayloads || d.Delete {
		t.Fatalf("a month on: %+v", d)
	}
	r.Status = store.StatusFailed
	if d := p.Decide(r, ended.AddDate(0, 2, 0)); d.ExpirePayloads || d.Rule != retention.RuleFailed {
		t.Fatalf("failed, two months on: %+v", d)
	}
	if d := p.Decide(r, ended.AddDate(0, 13, 0)); !d.Delete || !d.ExpirePayloads {
		t.Fatalf("13 months on: %+v", d)
	}
	r.Status = store.StatusWaiting
	if d := p.Decide(r, ended.AddDate(5, 0, 0)); d.ExpirePayloads || d.Delete {
		t.Fatalf("a run still waiting: %+v", d)
	}
}
