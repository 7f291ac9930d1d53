package storetest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
)

// SealedStore is a store opened with a blob master key, and the blob
// store under it (what a backup of the blob folder or bucket holds).
type SealedStore struct {
	Store interface {
		store.Store
		store.RetentionStore
	}
	Backend store.Blobs
}

// ExerciseRetention runs the retention and erasure suite: blobs sealed so
// the back end holds only ciphertext under a name unrelated to the
// content, removal that destroys the key and deletes the object (a
// restored backup of the object stays unreadable), legacy plaintext blobs
// read and removed, a removal refused for content put again, run erasure
// keeping the chain's hashes, and the deletion of an ended run.
func ExerciseRetention(t *testing.T, newStore func(t *testing.T) SealedStore) {
	t.Run("Sealed", func(t *testing.T) { testSealed(t, newStore(t)) })
	t.Run("Remove", func(t *testing.T) { testRemoveBlob(t, newStore(t)) })
	t.Run("Legacy", func(t *testing.T) { testLegacyBlob(t, newStore(t)) })
	t.Run("PutAgainDuringPurge", func(t *testing.T) { testRemoveRace(t, newStore(t)) })
	t.Run("EraseRun", func(t *testing.T) { testEraseRun(t, newStore(t)) })
	t.Run("DeleteRun", func(t *testing.T) { testDeleteRun(t, newStore(t)) })
}

var secretText = []byte(`{"customer":"Asha Rao","card":"4111 1111 1111 1111","note":"duplicate charge of 12,000 INR"}`)

// object returns the back end's name of tenant's content sum.
func object(t *testing.T, s SealedStore, tenant string, sum [32]byte) [32]byte {
	t.Helper()
	k, err := s.Store.GetBlobKey(t.Context(), tenant, sum)
	ok(t, "GetBlobKey", err)
	return k.Object
}

func testSealed(t *testing.T, s SealedStore) {
	ctx := t.Context()
	sum := putBlob(t, s.Store.Blobs(tenantA), secretText)
	checkBlob(t, "sealed round trip", s.Store.Blobs(tenantA), sum, secretText)
	obj := object(t, s, tenantA, sum)
	if obj == sum {
		t.Fatal("the sealed object is named by the plaintext's hash: a backup could confirm a guessed content")
	}
	if _, err := s.Backend.Blobs(tenantA).GetBlob(ctx, sum); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("back end under the plaintext hash: err = %v, want not found (nothing stored in the clear)", err)
	}
	raw, err := s.Backend.Blobs(tenantA).GetBlob(ctx, obj)
	ok(t, "back end GetBlob(object)", err)
	if bytes.Contains(raw, []byte("Asha Rao")) || bytes.Contains(raw, secretText[:20]) {
		t.Fatal("the back end holds the plaintext")
	}
	// The same content put again rewrites the same object (a damaged copy
	// is repaired), and another tenant's copy is sealed apart.
	putBlob(t, s.Store.Blobs(tenantA), secretText)
	if again := object(t, s, tenantA, sum); again != obj {
		t.Fatalf("second put sealed to %x, first to %x", again[:6], obj[:6])
	}
	putBlob(t, s.Store.Blobs(tenantB), secretText)
	if other := object(t, s, tenantB, sum); other == obj {
		t.Fatal("two tenants' copies of one content are the same object")
	}
}

func testRemoveBlob(t *testing.T, s SealedStore) {
	ctx := t.Context()
	blobs := s.Store.Blobs(tenantA)
	sum := putBlob(t, blobs, secretText)
	obj := object(t, s, tenantA, sum)
	backup, err := s.Backend.Blobs(tenantA).GetBlob(ctx, obj) // a backup of the blob store
	ok(t, "back end GetBlob", err)
	at := Base.Add(time.Hour)
	ok(t, "RemoveBlob", s.Store.RemoveBlob(ctx, tenantA, sum, int64(len(secretText)), store.RemovedErased, at, time.Now().Add(time.Hour)))
	ok(t, "RemoveBlob(again)", s.Store.RemoveBlob(ctx, tenantA, sum, int64(len(secretText)), store.RemovedExpired, at.Add(time.Hour), time.Now().Add(time.Hour)))
	checkRemoved(t, blobs, sum, store.RemovedErased, at)
	if _, err := s.Backend.Blobs(tenantA).GetBlob(ctx, obj); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the sealed object is still in the back end: err = %v", err)
	}
	k, err := s.Store.GetBlobKey(ctx, tenantA, sum)
	ok(t, "GetBlobKey(removed)", err)
	if k.Wrapped != nil || k.Size != int64(len(secretText)) {
		t.Fatalf("removed key = wrapped %d bytes, size %d; want destroyed, size kept", len(k.Wrapped), k.Size)
	}
	// The backup restored into the blob store opens with nothing.
	_, err = s.Backend.Blobs(tenantA).PutBlob(ctx, backup)
	ok(t, "restore the backup", err)
	checkRemoved(t, blobs, sum, store.RemovedErased, at)
	// Put again, the content is new content with a new key.
	putBlob(t, blobs, secretText)
	checkBlob(t, "put again after removal", blobs, sum, secretText)
	if object(t, s, tenantA, sum) == obj {
		t.Fatal("content put again after its key was destroyed reuses the old key")
	}
	// Another tenant never learns of tenant A's removal.
	if _, err := s.Store.Blobs(tenantB).GetBlob(ctx, sum); !errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrRemoved) {
		t.Fatalf("tenant B reading A's removed blob: err = %v, want plain not found", err)
	}
}

func checkRemoved(t *testing.T, blobs store.BlobStore, sum [32]byte, reason string, at time.Time) {
	t.Helper()
	_, err := blobs.GetBlob(t.Context(), sum)
	var re *store.RemovedError
	if !errors.As(err, &re) || !errors.Is(err, store.ErrNotFound) || re.Reason != reason || !re.At.Equal(at) {
		t.Fatalf("GetBlob(removed) err = %v, want a RemovedError (%s at %v) that is also not found", err, reason, at)
	}
	if _, err := blobs.BlobSize(t.Context(), sum); !errors.Is(err, store.ErrRemoved) {
		t.Fatalf("BlobSize(removed) err = %v, want ErrRemoved", err)
	}
}

func testLegacyBlob(t *testing.T, s SealedStore) {
	ctx := t.Context()
	legacy := []byte("a tool result stored before blobs were sealed")
	sum, err := s.Backend.Blobs(tenantA).PutBlob(ctx, legacy) // as an older agentplane wrote it
	ok(t, "back end PutBlob", err)
	checkBlob(t, "legacy blob", s.Store.Blobs(tenantA), sum, legacy)
	if n, err := s.Store.Blobs(tenantA).BlobSize(ctx, sum); err != nil || n != int64(len(legacy)) {
		t.Fatalf("BlobSize(legacy) = %d, %v", n, err)
	}
	at := Base.Add(2 * time.Hour)
	ok(t, "RemoveBlob(legacy)", s.Store.RemoveBlob(ctx, tenantA, sum, int64(len(legacy)), store.RemovedExpired, at, time.Now().Add(time.Hour)))
	checkRemoved(t, s.Store.Blobs(tenantA), sum, store.RemovedExpired, at)
	if _, err := s.Backend.Blobs(tenantA).GetBlob(ctx, sum); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the legacy plaintext is still in the back end: err = %v", err)
	}
}

func testRemoveRace(t *testing.T, s SealedStore) {
	ctx := t.Context()
	purgeBegan := time.Now().Add(-time.Minute)
	sum := putBlob(t, s.Store.Blobs(tenantA), secretText) // a new run put it after the purge began
	err := s.Store.RemoveBlob(ctx, tenantA, sum, int64(len(secretText)), store.RemovedExpired, time.Now(), purgeBegan)
	wantErr(t, "RemoveBlob(put since the purge began)", err, store.ErrConflict)
	checkBlob(t, "content put during the purge", s.Store.Blobs(tenantA), sum, secretText)
}

// endedRun makes a run with a log of n events and ends it with status.
func endedRun(t *testing.T, s store.Store, id, status string, n int) *chain {
	t.Helper()
	newRun(t, s, id, modeAsync, Base)
	r := claim(t, s, id, "w", Base)
	c := &chain{runID: id}
	c.appendOK(t, s, r.LeaseEpoch, c.next(n, "step"))
	result := "refund of 12,000 INR to Asha Rao"
	ok(t, "ReleaseRun", s.ReleaseRun(t.Context(), id, r.LeaseEpoch, store.RunUpdate{Status: &status, Result: &result}))
	return c
}

func testEraseRun(t *testing.T, s SealedStore) {
	ctx := t.Context()
	st := s.Store
	c := endedRun(t, st, "run-erase", store.StatusCompleted, 4)
	endedRun(t, st, "run-other", store.StatusCompleted, 2)
	ok(t, "SendSignal", st.SendSignal(ctx, &store.Signal{RunID: "run-erase", Kind: "message", Payload: []byte(`{"text":"my card number"}`), CreatedAt: Base}))
	e := &store.Erasure{ID: "er_1", Tenant: "tenant-1", RunID: "run-erase", User: "user-1", RequestedBy: "admin", Reason: "GDPR art. 17", At: Base.Add(time.Hour), Blobs: 3}
	ok(t, "EraseRun", st.EraseRun(ctx, e, func(ev *store.Event) []byte { return []byte(`{"erased":"er_1"}`) }))
	if e.Events != 4 {
		t.Fatalf("Erasure.Events = %d, want 4", e.Events)
	}
	evs := readEvents(t, st, "run-erase", 0, 0)
	for i, ev := range evs {
		want := c.log[i]
		if string(ev.Payload) != `{"erased":"er_1"}` || ev.Hash != want.Hash || ev.PrevHash != want.PrevHash || ev.Type != want.Type || !ev.At.Equal(want.At.Truncate(time.Microsecond)) {
			t.Fatalf("erased event %d = %s %s, want the scrubbed payload with type, time and hashes kept", ev.Seq, ev.Type, ev.Payload)
		}
	}
	r := getRun(t, st, "run-erase")
	if r.Task != "" || r.Result != "" || r.Status != store.StatusCompleted || r.LastSeq != 4 {
		t.Fatalf("erased run = task %q result %q status %s last_seq %d; want content cleared, metadata kept", r.Task, r.Result, r.Status, r.LastSeq)
	}
	if sigs, err := st.PendingSignals(ctx, "run-erase"); err != nil || len(sigs) != 0 {
		t.Fatalf("PendingSignals after erasure = %d, %v; want none", len(sigs), err)
	}
	got, err := st.Erasures(ctx, "run-erase")
	ok(t, "Erasures", err)
	if len(got) != 1 || *got[0] != *e {
		t.Fatalf("Erasures = %+v, want [%+v]", got, e)
	}
	if other := readEvents(t, st, "run-other", 0, 0); bytes.Contains(other[0].Payload, []byte("erased")) {
		t.Fatal("erasure touched another run")
	}
	ok(t, "MarkPayloadsRemoved(expired)", st.MarkPayloadsRemoved(ctx, "run-other", store.RemovedExpired, Base))
	ok(t, "MarkPayloadsRemoved(erased)", st.MarkPayloadsRemoved(ctx, "run-other", store.RemovedErased, Base.Add(time.Hour)))
	ok(t, "MarkPayloadsRemoved(expired after erased)", st.MarkPayloadsRemoved(ctx, "run-other", store.RemovedExpired, Base.Add(2*time.Hour)))
	if reason, at, err := st.PayloadsRemoved(ctx, "run-other"); err != nil || reason != store.RemovedErased || !at.Equal(Base.Add(time.Hour)) {
		t.Fatalf("PayloadsRemoved = %s %v %v, want erased at +1h (an erasure is never downgraded)", reason, at, err)
	}
	if reason, _, err := st.PayloadsRemoved(ctx, "run-erase"); err != nil || reason != "" {
		t.Fatalf("PayloadsRemoved(never marked) = %q, %v", reason, err)
	}

	newRun(t, st, "run-live", modeAsync, Base)
	claim(t, st, "run-live", "w", Base)
	wantErr(t, "EraseRun(running)", st.EraseRun(ctx, &store.Erasure{ID: "er_2", RunID: "run-live", At: Base}, func(*store.Event) []byte { return []byte(`{}`) }), store.ErrConflict)
	wantErr(t, "EraseRun(missing)", st.EraseRun(ctx, &store.Erasure{ID: "er_3", RunID: "nope", At: Base}, func(*store.Event) []byte { return []byte(`{}`) }), store.ErrNotFound)
}

func testDeleteRun(t *testing.T, s SealedStore) {
	ctx := t.Context()
	st := s.Store
	endedRun(t, st, "run-old", store.StatusFailed, 3)
	endedRun(t, st, "run-kept", store.StatusCompleted, 2)
	ok(t, "MarkPayloadsRemoved", st.MarkPayloadsRemoved(ctx, "run-old", store.RemovedExpired, Base))
	ok(t, "EraseRun", st.EraseRun(ctx, &store.Erasure{ID: "er_old", Tenant: "tenant-1", RunID: "run-old", At: Base}, func(*store.Event) []byte { return []byte(`{}`) }))
	ok(t, "DeleteRun", st.DeleteRun(ctx, "run-old"))
	if _, err := st.GetRun(ctx, "run-old"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetRun(deleted) err = %v, want not found", err)
	}
	if evs := readEvents(t, st, "run-old", 0, 0); len(evs) != 0 {
		t.Fatalf("deleted run still has %d events", len(evs))
	}
	if es, err := st.Erasures(ctx, "run-old"); err != nil || len(es) != 0 {
		t.Fatalf("deleted run's erasures = %d, %v", len(es), err)
	}
	if reason, _, _ := st.PayloadsRemoved(ctx, "run-old"); reason != "" {
		t.Fatalf("deleted run's payload mark = %q", reason)
	}
	if evs := readEvents(t, st, "run-kept", 0, 0); len(evs) != 2 {
		t.Fatalf("another run lost events: %d", len(evs))
	}
	wantErr(t, "DeleteRun(again)", st.DeleteRun(ctx, "run-old"), store.ErrNotFound)
	newRun(t, st, "run-queued", modeAsync, Base)
	wantErr(t, "DeleteRun(queued)", st.DeleteRun(ctx, "run-queued"), store.ErrConflict)
}
