// Package storetest is the conformance suite for store.Store
// implementations. A back end is done when its tests call Exercise and pass
// with the race detector on:
//
//	func TestConformance(t *testing.T) {
//		storetest.Exercise(t, func(t *testing.T) store.Store {
//			s := open(t.TempDir())
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// Every subtest asks newStore for a fresh, empty store, so subtests do not see
// each other's data; newStore is responsible for closing it (t.Cleanup). The
// suite passes explicit times to every lease operation and never sleeps, so
// it checks lease expiry without waiting for a clock.
//
// ExerciseAPI covers store.APIStore, and ExerciseProcesses the cases only
// many processes on one database exercise (two handles race claims,
// renewals, appends, idempotency keys, approval decisions and signals).
// BenchSteps is the store benchmark every back end is measured with.
package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
)

// Exercise runs the conformance suite against stores made by newStore.
func Exercise(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("Runs", func(t *testing.T) { testRuns(t, newStore) })
	t.Run("PromptHashes", func(t *testing.T) { testPromptHashes(t, newStore(t)) })
	t.Run("Leases", func(t *testing.T) { testLeases(t, newStore) }) // LeaseStore
	t.Run("Events", func(t *testing.T) { testEvents(t, newStore) })
	t.Run("GroupCommit", func(t *testing.T) { testGroupCommit(t, newStore(t)) })
	t.Run("FailureIsolation", func(t *testing.T) { testFailureIsolation(t, newStore(t)) })
	t.Run("Blobs", func(t *testing.T) {
		testBlobs(t, func(t *testing.T) BlobBackend { return BlobBackend{Blobs: newStore(t)} })
	})
	t.Run("Agents", func(t *testing.T) { testAgents(t, newStore(t)) })
	t.Run("Tools", func(t *testing.T) { testTools(t, newStore(t)) })
	t.Run("Signals", func(t *testing.T) { testSignals(t, newStore(t)) })
	t.Run("Principals", func(t *testing.T) { testPrincipals(t, newStore(t)) })
	t.Run("TenantSettings", func(t *testing.T) { testTenantSettings(t, newStore(t)) })
	t.Run("Connectors", func(t *testing.T) { testConnectors(t, newStore(t)) })
}

// Base is the time the suite's runs are created at and its leases are taken
// at; it lies in the future so that no implementation's own clock interferes.
var Base = time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)

const (
	modeStream = "stream"
	modeAsync  = "async"
	leaseTTL   = time.Minute
)

// newRun creates a queued run with the given id, mode and creation time.
func newRun(t *testing.T, s store.Store, id, mode string, created time.Time) *store.Run {
	t.Helper()
	r := &store.Run{
		ID: id, Tenant: "tenant-1", User: "user-1", Agent: "agent-1", AgentVersion: 1,
		Task: "task of " + id, Mode: mode, Status: store.StatusQueued, CreatedAt: created,
	}
	if err := s.CreateRun(t.Context(), r); err != nil {
		t.Fatalf("CreateRun(%s): %v", id, err)
	}
	return r
}

// claim leases run id to owner at now and checks the returned lease.
func claim(t *testing.T, s store.Store, id, owner string, now time.Time) *store.Run {
	t.Helper()
	r, err := s.ClaimRunByID(t.Context(), id, owner, leaseTTL, now)
	if err != nil {
		t.Fatalf("ClaimRunByID(%s, %s): %v", id, owner, err)
	}
	checkLease(t, r, id, owner, now)
	return r
}

func checkLease(t *testing.T, r *store.Run, id, owner string, now time.Time) {
	t.Helper()
	if r.ID != id || r.LeaseOwner != owner || r.LeaseEpoch < 1 || r.Status != store.StatusRunning ||
		!r.LeaseExpires.Equal(now.Add(leaseTTL)) {
		t.Fatalf("claimed run = {ID:%s Owner:%q Epoch:%d Status:%s Expires:%v}, want {ID:%s Owner:%q Epoch>=1 Status:running Expires:%v}",
			r.ID, r.LeaseOwner, r.LeaseEpoch, r.Status, r.LeaseExpires, id, owner, now.Add(leaseTTL))
	}
}

func getRun(t *testing.T, s store.Store, id string) *store.Run {
	t.Helper()
	r, err := s.GetRun(t.Context(), id)
	if err != nil {
		t.Fatalf("GetRun(%s): %v", id, err)
	}
	return r
}

// wantErr fails unless err matches target.
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: err = %v, want %v", what, err, target)
	}
}

func ok(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// chain builds a run's event log: it remembers the last accepted sequence
// number and hash, and makes correctly chained events after them.
type chain struct {
	runID string
	seq   int64
	head  [32]byte
	log   []store.Event // the accepted events
}

// next returns n events following the accepted ones without accepting them.
// Their times carry nanoseconds so that microsecond truncation is observable.
func (c *chain) next(n int, typ string) []store.Event {
	evs := make([]store.Event, n)
	head, seq := c.head, c.seq
	for i := range evs {
		seq++
		payload, _ := json.Marshal(map[string]any{"run": c.runID, "seq": seq, "type": typ})
		evs[i] = store.Event{
			RunID: c.runID, Seq: seq, Type: typ, Step: int(seq) / 2,
			At:      Base.Add(time.Duration(seq)*time.Second + 123456789*time.Nanosecond),
			Payload: payload, PrevHash: head,
		}
		evs[i].Hash = store.ChainHash(head, &evs[i])
		head = evs[i].Hash
	}
	return evs
}

// accept records evs as written.
func (c *chain) accept(evs []store.Event) {
	if n := len(evs); n > 0 {
		c.seq, c.head = evs[n-1].Seq, evs[n-1].Hash
		c.log = append(c.log, evs...)
	}
}

// appendOK appends evs durably under epoch and accepts them.
func (c *chain) appendOK(t *testing.T, s store.Store, epoch int64, evs []store.Event) {
	t.Helper()
	ok(t, fmt.Sprintf("Append(%s seq %d..%d)", c.runID, evs[0].Seq, evs[len(evs)-1].Seq),
		s.Append(t.Context(), store.AppendRequest{RunID: c.runID, Epoch: epoch, Events: evs, Durable: true}))
	c.accept(evs)
}

func readEvents(t *testing.T, s store.Store, runID string, after int64, limit int) []store.Event {
	t.Helper()
	evs, err := s.Events(t.Context(), runID, after, limit)
	if err != nil {
		t.Fatalf("Events(%s, %d, %d): %v", runID, after, limit, err)
	}
	return evs
}

// checkEvents fails unless got equals want field by field, with want's times
// truncated to the microsecond.
func checkEvents(t *testing.T, what string, got, want []store.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d events %v, want %d %v", what, len(got), seqs(got), len(want), seqs(want))
	}
	for i := range want {
		if d := diffEvent(got[i], want[i]); d != "" {
			t.Fatalf("%s: event %d: %s", what, i, d)
		}
	}
}

func diffEvent(got, want store.Event) string {
	switch {
	case got.RunID != want.RunID:
		return fmt.Sprintf("RunID = %q, want %q", got.RunID, want.RunID)
	case got.Seq != want.Seq:
		return fmt.Sprintf("Seq = %d, want %d", got.Seq, want.Seq)
	case got.Type != want.Type:
		return fmt.Sprintf("seq %d: Type = %q, want %q", want.Seq, got.Type, want.Type)
	case got.Step != want.Step:
		return fmt.Sprintf("seq %d: Step = %d, want %d", want.Seq, got.Step, want.Step)
	case !got.At.Equal(want.At.Truncate(time.Microsecond)):
		return fmt.Sprintf("seq %d: At = %v, want %v", want.Seq, got.At, want.At.Truncate(time.Microsecond))
	case !bytes.Equal(got.Payload, want.Payload):
		return fmt.Sprintf("seq %d: Payload = %q, want %q", want.Seq, got.Payload, want.Payload)
	case got.PrevHash != want.PrevHash:
		return fmt.Sprintf("seq %d: PrevHash = %x, want %x", want.Seq, got.PrevHash[:6], want.PrevHash[:6])
	case got.Hash != want.Hash:
		return fmt.Sprintf("seq %d: Hash = %x, want %x", want.Seq, got.Hash[:6], want.Hash[:6])
	}
	return ""
}

// verifyChain checks that evs is a complete log: seq 1..n, each hash chained
// to the previous one, as an auditor re-reading the store would.
func verifyChain(evs []store.Event) error {
	var prev [32]byte
	for i := range evs {
		ev := &evs[i]
		if ev.Seq != int64(i+1) {
			return fmt.Errorf("event %d has seq %d", i, ev.Seq)
		}
		if ev.PrevHash != prev {
			return fmt.Errorf("seq %d: PrevHash %x, want %x", ev.Seq, ev.PrevHash[:6], prev[:6])
		}
		if h := store.ChainHash(prev, ev); h != ev.Hash {
			return fmt.Errorf("seq %d: Hash %x, recomputed %x", ev.Seq, ev.Hash[:6], h[:6])
		}
		prev = ev.Hash
	}
	return nil
}

func seqs(evs []store.Event) []int64 {
	out := make([]int64, len(evs))
	for i := range evs {
		out[i] = evs[i].Seq
	}
	return out
}

func ptr[T any](v T) *T { return &v }
