package sqlite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/blobdir"
	"github.com/agentplane/agentplane/store/storetest"
)

func open(t testing.TB, dir string) *Store {
	t.Helper()
	return openWith(t, Options{Dir: dir})
}

func openWith(t testing.TB, o Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), o)
	if err != nil {
		t.Fatalf("Open(%s): %v", o.Dir, err)
	}
	return s
}

// openTemp opens a store in a fresh directory, closed when the test ends.
func openTemp(t testing.TB) *Store {
	s := open(t, t.TempDir())
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store { return openTemp(t) })
}

var base = storetest.Base

func ptr[T any](v T) *T { return &v }

// events makes n chained events of run id after seq/head.
func events(id string, seq int64, head [32]byte, n int, typ string) []store.Event {
	evs := make([]store.Event, n)
	for i := range evs {
		seq++
		evs[i] = store.Event{RunID: id, Seq: seq, Type: typ, Step: int(seq), At: base.Add(time.Duration(seq) * time.Millisecond),
			Payload: fmt.Appendf(nil, `{"seq":%d}`, seq), PrevHash: head}
		evs[i].Hash = store.ChainHash(head, &evs[i])
		head = evs[i].Hash
	}
	return evs
}

func mustChain(t *testing.T, s store.Store, id string, n int) []store.Event {
	t.Helper()
	evs, err := s.Events(t.Context(), id, 0, 0)
	if err != nil {
		t.Fatalf("Events(%s): %v", id, err)
	}
	if len(evs) != n {
		t.Fatalf("Events(%s) = %d events, want %d", id, len(evs), n)
	}
	var prev [32]byte
	for i := range evs {
		if evs[i].Seq != int64(i+1) || evs[i].PrevHash != prev || store.ChainHash(prev, &evs[i]) != evs[i].Hash {
			t.Fatalf("%s: event %d (seq %d) breaks the chain", id, i, evs[i].Seq)
		}
		prev = evs[i].Hash
	}
	return evs
}

func createAndClaim(t *testing.T, s *Store, id, owner string, now time.Time) *store.Run {
	t.Helper()
	if err := s.CreateRun(t.Context(), &store.Run{ID: id, Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x",
		Mode: "async", CreatedAt: base}); err != nil {
		t.Fatalf("CreateRun(%s): %v", id, err)
	}
	r, err := s.ClaimRunByID(t.Context(), id, owner, time.Minute, now)
	if err != nil {
		t.Fatalf("ClaimRunByID(%s): %v", id, err)
	}
	return r
}

func TestReopenKeepsData(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := t.Context()
	r := createAndClaim(t, s, "r", "A", base)
	evs := events("r", 0, [32]byte{}, 5, "ev")
	if err := s.Append(ctx, store.AppendRequest{RunID: "r", Epoch: r.LeaseEpoch, Events: evs, Durable: true,
		Update: &store.RunUpdate{Steps: ptr(5), CostMicros: ptr(int64(77))}}); err != nil {
		t.Fatal(err)
	}
	sum, err := s.Blobs("tenant-1").PutBlob(ctx, []byte("blob"))
	if err != nil {
		t.Fatal(err)
	}
	spec := []byte(`{"model":"m"}`)
	if _, err := s.PutAgentVersion(ctx, &store.AgentVersion{Name: "a", Version: 1, Spec: spec, SpecHash: sha256.Sum256(spec)}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetAlias(ctx, &store.Alias{Agent: "a", Alias: "prod", Version: 1, CanaryVersion: 2, CanaryPercent: 5}); err != nil {
		t.Fatal(err)
	}
	manifest := []byte(`{"name":"t"}`)
	if err := s.PutTool(ctx, &store.ToolRecord{Name: "t", Manifest: manifest, Hash: sha256.Sum256(manifest)}); err != nil {
		t.Fatal(err)
	}
	sg := &store.Signal{RunID: "r", Kind: "message", Payload: []byte(`{}`)}
	if err := s.SendSignal(ctx, sg); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir)
	defer s.Close()
	got := mustChain(t, s, "r", 5)
	if got[4].Hash != evs[4].Hash {
		t.Fatal("reopened log differs")
	}
	run, err := s.GetRun(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if run.LastSeq != 5 || run.Steps != 5 || run.CostMicros != 77 || run.LeaseOwner != "A" || run.LeaseEpoch != r.LeaseEpoch {
		t.Fatalf("reopened run: %+v", run)
	}
	if b, err := s.Blobs("tenant-1").GetBlob(ctx, sum); err != nil || string(b) != "blob" {
		t.Fatalf("GetBlob after reopen: %q, %v", b, err)
	}
	if v, err := s.GetAgentVersion(ctx, "a", 1); err != nil || !bytes.Equal(v.Spec, spec) {
		t.Fatalf("GetAgentVersion after reopen: %v", err)
	}
	if a, err := s.GetAlias(ctx, "a", "prod"); err != nil || a.CanaryPercent != 5 {
		t.Fatalf("GetAlias after reopen: %+v, %v", a, err)
	}
	if tr, err := s.GetTool(ctx, "t"); err != nil || !bytes.Equal(tr.Manifest, manifest) {
		t.Fatalf("GetTool after reopen: %v", err)
	}
	if p, err := s.PendingSignals(ctx, "r"); err != nil || len(p) != 1 || p[0].ID != sg.ID {
		t.Fatalf("PendingSignals after reopen: %d, %v", len(p), err)
	}
	// The lease survives too: the old epoch still appends, and the run is
	// not claimable before expiry.
	if _, err := s.ClaimRun(ctx, "B", time.Minute, base.Add(time.Second)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ClaimRun of a leased run after reopen: %v", err)
	}
	if err := s.Append(ctx, store.AppendRequest{RunID: "r", Epoch: r.LeaseEpoch, Events: events("r", 5, evs[4].Hash, 1, "ev"), Durable: true}); err != nil {
		t.Fatalf("Append after reopen: %v", err)
	}
	mustChain(t, s, "r", 6)
}

func TestCloseDrainsBufferedAppends(t *testing.T) {
	dir := t.TempDir()
	// Small batches: Close must find appends still queued however the
	// writer interleaves its last batches with the stop signal.
	s := openWith(t, Options{Dir: dir, MaxBatch: 4})
	const runs, perRun = 8, 40
	epochs := make([]int64, runs)
	for i := range runs {
		epochs[i] = createAndClaim(t, s, fmt.Sprintf("r%d", i), "A", base).LeaseEpoch
	}
	// Hold the writer so that the appends are still queued when Close
	// begins.
	unpark := park(t, s)
	for i := range runs {
		id := fmt.Sprintf("r%d", i)
		var head [32]byte
		for seq := int64(0); seq < perRun; seq += 4 {
			evs := events(id, seq, head, 4, "buffered")
			if err := s.Append(t.Context(), store.AppendRequest{RunID: id, Epoch: epochs[i], Events: evs,
				Update: &store.RunUpdate{Steps: ptr(int(seq + 4))}}); err != nil {
				t.Fatal(err)
			}
			head = evs[3].Hash
		}
	}
	if n := len(s.queue); n != runs*perRun/4 {
		t.Fatalf("%d appends queued, want %d", n, runs*perRun/4)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	<-s.done // Close has told the writer to stop
	unpark()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	defer s.Close()
	for i := range runs {
		id := fmt.Sprintf("r%d", i)
		mustChain(t, s, id, perRun)
		if r, err := s.GetRun(t.Context(), id); err != nil || r.LastSeq != perRun || r.Steps != perRun {
			t.Fatalf("%s after reopen: %+v, %v", id, r, err)
		}
	}
}

// park stops the writer goroutine inside a group commit, waiting for the
// single write connection, which park holds until unpark is called. Appends
// queue up meanwhile, and the writer takes them (up to MaxBatch) as its next
// batch.
func park(t *testing.T, s *Store) (unpark func()) {
	t.Helper()
	conn, err := s.w.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	parked := make(chan error, 1)
	began := s.stats.batches.Load()
	go func() { parked <- s.Flush(context.Background(), "park") }()
	// The writer has taken the Flush as its batch (and stopped filling it)
	// once it begins to write it: it then waits for the connection.
	waitFor(t, func() bool { return s.stats.batches.Load() > began })
	return func() {
		t.Helper()
		conn.Close()
		if err := <-parked; err != nil {
			t.Errorf("parked Flush: %v", err)
		}
	}
}

// TestTwoProcesses opens two stores on one directory, as two agentplane
// processes sharing a data directory would, and checks that leases fence
// them against each other.
func TestTwoProcesses(t *testing.T) {
	dir := t.TempDir()
	a := open(t, dir)
	defer a.Close()
	b := open(t, dir)
	defer b.Close()
	ctx := t.Context()

	ra := createAndClaim(t, a, "r", "proc-a", base)
	evs := events("r", 0, [32]byte{}, 2, "a")
	if err := a.Append(ctx, store.AppendRequest{RunID: "r", Epoch: ra.LeaseEpoch, Events: evs, Durable: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ClaimRun(ctx, "proc-b", time.Minute, base.Add(30*time.Second)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("B claimed a run A still holds: %v", err)
	}
	rb, err := b.ClaimRun(ctx, "proc-b", time.Minute, base.Add(2*time.Minute))
	if err != nil {
		t.Fatalf("B ClaimRun after A's lease expired: %v", err)
	}
	if rb.ID != "r" || rb.LeaseEpoch <= ra.LeaseEpoch || rb.LastSeq != 2 {
		t.Fatalf("B claimed %+v", rb)
	}

	// A, unaware, carries on and is fenced out.
	next := events("r", 2, evs[1].Hash, 1, "a")
	err = a.Append(ctx, store.AppendRequest{RunID: "r", Epoch: ra.LeaseEpoch, Events: next, Durable: true})
	if !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("A's durable append after takeover: %v, want ErrLeaseLost", err)
	}
	if err := a.RenewLease(ctx, "r", ra.LeaseEpoch, time.Minute, base.Add(2*time.Minute)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("A's RenewLease after takeover: %v, want ErrLeaseLost", err)
	}
	if err := a.Append(ctx, store.AppendRequest{RunID: "r", Epoch: ra.LeaseEpoch, Events: next}); err == nil {
		if err := a.Flush(ctx, "r"); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("A's Flush after a buffered append after takeover: %v, want ErrLeaseLost", err)
		}
	} else if !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("A's buffered append after takeover: %v", err)
	}

	// B continues the log A wrote, and A reads what B wrote.
	mine := events("r", 2, evs[1].Hash, 2, "b")
	if err := b.Append(ctx, store.AppendRequest{RunID: "r", Epoch: rb.LeaseEpoch, Events: mine, Durable: true}); err != nil {
		t.Fatalf("B's append: %v", err)
	}
	got := mustChain(t, a, "r", 4)
	if got[2].Type != "b" || got[3].Type != "b" {
		t.Fatalf("log as A reads it: %v", []string{got[0].Type, got[1].Type, got[2].Type, got[3].Type})
	}
	if err := a.ReleaseRun(ctx, "r", ra.LeaseEpoch, store.RunUpdate{Status: ptr(store.StatusFailed)}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("A's ReleaseRun after takeover: %v, want ErrLeaseLost", err)
	}
	if err := b.ReleaseRun(ctx, "r", rb.LeaseEpoch, store.RunUpdate{Status: ptr(store.StatusCompleted)}); err != nil {
		t.Fatalf("B's ReleaseRun: %v", err)
	}
	if r, err := a.GetRun(ctx, "r"); err != nil || r.Status != store.StatusCompleted || r.LastSeq != 4 {
		t.Fatalf("run as A reads it: %+v, %v", r, err)
	}
}

// TestOneBatchIsolation makes sure, by holding the writer's connection, that
// valid and failing appends land in one group commit, and checks that only
// the failing ones fail.
func TestOneBatchIsolation(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	const good = 8
	var goodRuns []*store.Run
	for i := range good {
		goodRuns = append(goodRuns, createAndClaim(t, s, fmt.Sprintf("good%d", i), "A", base))
	}
	old := createAndClaim(t, s, "fenced", "A", base)
	cur, err := s.ClaimRunByID(ctx, "fenced", "B", time.Minute, base.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	gap := createAndClaim(t, s, "gap", "A", base)
	sig := createAndClaim(t, s, "sig", "A", base)
	sg := &store.Signal{RunID: "sig", Kind: "message", Payload: []byte(`{}`)}
	if err := s.SendSignal(ctx, sg); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkSignalConsumed(ctx, sg.ID); err != nil {
		t.Fatal(err)
	}

	unpark := park(t, s)

	type call struct {
		name string
		req  store.AppendRequest
		want error
	}
	var calls []call
	for i, r := range goodRuns {
		calls = append(calls, call{r.ID, store.AppendRequest{RunID: r.ID, Epoch: r.LeaseEpoch, Events: events(r.ID, 0, [32]byte{}, 3, "ok"),
			Durable: i%2 == 0, Update: &store.RunUpdate{Steps: ptr(3)}}, nil})
	}
	calls = append(calls,
		call{"fenced-old", store.AppendRequest{RunID: "fenced", Epoch: old.LeaseEpoch, Events: events("fenced", 0, [32]byte{}, 1, "stale"),
			Durable: true, Update: &store.RunUpdate{Result: ptr("stale")}}, store.ErrLeaseLost},
		call{"fenced-new", store.AppendRequest{RunID: "fenced", Epoch: cur.LeaseEpoch, Events: events("fenced", 0, [32]byte{}, 2, "ok"),
			Durable: true}, nil},
		call{"gap", store.AppendRequest{RunID: "gap", Epoch: gap.LeaseEpoch, Events: events("gap", 1, [32]byte{}, 2, "bad"),
			Durable: true}, store.ErrConflict},
		call{"consumed", store.AppendRequest{RunID: "sig", Epoch: sig.LeaseEpoch, Events: events("sig", 0, [32]byte{}, 1, "signal"),
			Durable: true, ConsumeSignals: []int64{sg.ID}}, store.ErrConflict},
		call{"missing", store.AppendRequest{RunID: "nope", Epoch: 1, Events: events("nope", 0, [32]byte{}, 1, "x"),
			Durable: true}, store.ErrNotFound},
	)
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	durable := 0
	for i, c := range calls {
		if !c.req.Durable {
			if err := s.Append(ctx, c.req); err != nil {
				t.Fatalf("%s: buffered Append: %v", c.name, err)
			}
			continue
		}
		durable++
		wg.Go(func() { errs[i] = s.Append(ctx, c.req) })
	}
	waitFor(t, func() bool { return len(s.queue) == len(calls) })
	if len(calls) > s.maxBatch {
		t.Fatalf("test bug: %d calls do not fit one batch of %d", len(calls), s.maxBatch)
	}
	unpark() // the next batch holds every call
	wg.Wait()
	for i, c := range calls {
		if !c.req.Durable {
			errs[i] = s.Flush(ctx, c.req.RunID)
		}
		if c.want == nil && errs[i] != nil || c.want != nil && !errors.Is(errs[i], c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, errs[i], c.want)
		}
	}
	for _, r := range goodRuns {
		mustChain(t, s, r.ID, 3)
	}
	if got := mustChain(t, s, "fenced", 2); got[0].Type != "ok" {
		t.Errorf("fenced run log has %s", got[0].Type)
	}
	if r, _ := s.GetRun(ctx, "fenced"); r.Result == "stale" {
		t.Error("fenced-out update applied")
	}
	mustChain(t, s, "gap", 0)
	mustChain(t, s, "sig", 0)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for condition")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAppendAfterClose checks that appends after Close fail instead of
// waiting forever for a writer that has stopped.
func TestAppendAfterClose(t *testing.T) {
	s := open(t, t.TempDir())
	r := createAndClaim(t, s, "r", "A", base)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		for range 50 {
			err := s.Append(context.Background(), store.AppendRequest{RunID: "r", Epoch: r.LeaseEpoch,
				Events: events("r", 0, [32]byte{}, 1, "late"), Durable: true})
			if err == nil {
				done <- errors.New("durable Append after Close succeeded")
				return
			}
			if err := s.Flush(context.Background(), "r"); err == nil {
				done <- errors.New("Flush after Close succeeded")
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Append or Flush after Close hangs")
	}
}

// TestCloseWhileAppending closes the store under concurrent appenders: every
// call must return, and whatever was acknowledged must be on disk.
func TestCloseWhileAppending(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	const runs = 16
	epochs := make([]int64, runs)
	for i := range runs {
		epochs[i] = createAndClaim(t, s, fmt.Sprintf("r%d", i), "A", base).LeaseEpoch
	}
	acked := make([]int64, runs)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() {
			id := fmt.Sprintf("r%d", i)
			var head [32]byte
			for seq := int64(0); ; seq++ {
				evs := events(id, seq, head, 1, "ev")
				if err := s.Append(context.Background(), store.AppendRequest{RunID: id, Epoch: epochs[i], Events: evs, Durable: true}); err != nil {
					return
				}
				acked[i], head = seq+1, evs[0].Hash
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	closed := make(chan struct{})
	go func() {
		s.Close()
		wg.Wait()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("appenders still blocked 20s after Close")
	}
	s = open(t, dir)
	defer s.Close()
	for i := range runs {
		id := fmt.Sprintf("r%d", i)
		evs, err := s.Events(t.Context(), id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(evs)) < acked[i] {
			t.Errorf("%s: %d events on disk, %d acknowledged", id, len(evs), acked[i])
		}
	}
}

// TestBlobsChosenApart: a store opened with another blob store keeps its
// blobs there and none in its data directory.
func TestBlobsChosenApart(t *testing.T) {
	elsewhere, err := blobdir.Open(filepath.Join(t.TempDir(), "elsewhere"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s, err := Open(t.Context(), Options{Dir: dir, Blobs: elsewhere})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	data := []byte("kept elsewhere")
	sum, err := s.Blobs("acme").PutBlob(t.Context(), data)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(elsewhere.Path("acme", sum)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("blob in the chosen store: %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "blobs")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the data directory has a blob folder (%v), want none", err)
	}
	if p := s.BlobPath("acme", sum); p != elsewhere.Path("acme", sum) {
		t.Fatalf("BlobPath = %q, want the chosen folder's %q", p, elsewhere.Path("acme", sum))
	}
}

var testBlobKey = bytes.Repeat([]byte{7}, 32)

// openSealed opens a store whose blobs are sealed, in a fresh directory.
func openSealed(t *testing.T) (*Store, *blobdir.Dir) {
	dir := t.TempDir()
	d, err := blobdir.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	s := openWith(t, Options{Dir: dir, Blobs: d, BlobKey: testBlobKey})
	t.Cleanup(func() { s.Close() })
	return s, d
}

// TestSealedConformance runs the whole suite, the blob suite with damaged
// sealed objects included, and the retention suite on a store whose blobs
// are sealed.
func TestSealedConformance(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store { s, _ := openSealed(t); return s })
	storetest.ExerciseBlobs(t, func(t *testing.T) storetest.BlobBackend {
		s, _ := openSealed(t)
		return storetest.BlobBackend{Blobs: s, Overwrite: func(t *testing.T, tenant string, sum [32]byte, data []byte) {
			if err := os.WriteFile(s.BlobPath(tenant, sum), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}}
	})
	storetest.ExerciseRetention(t, func(t *testing.T) storetest.SealedStore {
		s, d := openSealed(t)
		return storetest.SealedStore{Store: s, Backend: d}
	})
}

// TestBlobKeyMismatchRefused: a store sealed under one master key refuses
// to open with another, rather than failing every read.
func TestBlobKeyMismatchRefused(t *testing.T) {
	dir := t.TempDir()
	s := openWith(t, Options{Dir: dir, BlobKey: testBlobKey})
	s.Close()
	_, err := Open(t.Context(), Options{Dir: dir, BlobKey: bytes.Repeat([]byte{8}, 32)})
	if err == nil || !strings.Contains(err.Error(), "not the one") {
		t.Fatalf("Open with another blob key: err = %v, want a refusal naming the key", err)
	}
	s = openWith(t, Options{Dir: dir, BlobKey: testBlobKey})
	s.Close()
}

// TestConcurrentFirstOpen: stores opened at once on one fresh directory
// (the processes of a deployment starting together) all open: each
// migration is applied by one of them, the others see it applied.
func TestConcurrentFirstOpen(t *testing.T) {
	dir := t.TempDir()
	const n = 6
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			s, err := Open(context.Background(), Options{Dir: dir})
			if err == nil {
				err = s.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}
