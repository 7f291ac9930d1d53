package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The types and interface below back retention and erasure (package
// retention, docs/design/retention.md): the data key of every blob a
// tenant stored since blobs are encrypted (package store/blobcrypt), the
// record of which runs' payloads were removed and why, erasure records,
// and the deletion of a run past its metadata TTL.

// Reasons a payload is no longer readable.
const (
	RemovedExpired = "expired" // past its retention period (a purge)
	RemovedErased  = "erased"  // erased on request
)

// ErrRemoved is wrapped by a blob read of content that retention removed
// (expired) or an erasure destroyed; the error also wraps ErrNotFound, so
// a caller that only knows "missing" fails closed as before.
var ErrRemoved = errors.New("payload removed")

// RemovedError says why and when a blob's content was removed.
type RemovedError struct {
	Sum    [32]byte
	Reason string // RemovedExpired or RemovedErased
	At     time.Time
}

func (e *RemovedError) Error() string {
	return fmt.Sprintf("blob %x: payload %s at %s", e.Sum[:6], e.Reason, e.At.UTC().Format(time.RFC3339))
}

// Is makes errors.Is match ErrRemoved and ErrNotFound.
func (e *RemovedError) Is(target error) bool { return target == ErrRemoved || target == ErrNotFound }

// BlobKey is a tenant's data key for one blob's content: the key sealing
// the plaintext whose sha256 is Sum, wrapped by the tenant's key
// (package store/blobcrypt), and the name of the sealed object in the
// blob back end (the sha256 of the ciphertext). Once removed, Wrapped is
// nil (the key is destroyed) and Reason and RemovedAt say why and when.
type BlobKey struct {
	Tenant    string
	Sum       [32]byte
	Size      int64
	Wrapped   []byte
	Object    [32]byte
	CreatedAt time.Time
	// LastPut is the last time the content was put; a purge never removes
	// content put after it began (a new run may be about to name it).
	LastPut   time.Time
	Reason    string
	RemovedAt time.Time
}

// Erasure is the record of an erasure on request: what was erased, for
// whom, by whom, when. It outlives the content it erased (until the run's
// metadata TTL), so `trace verify` can say what is missing and why.
type Erasure struct {
	ID     string
	Tenant string
	RunID  string
	// User is set when the erasure was of everything about one user.
	User        string
	RequestedBy string
	Reason      string
	At          time.Time
	// Events and Blobs count the event payloads scrubbed and the blobs
	// whose keys were destroyed.
	Events int
	Blobs  int
}

// RetentionStore persists what retention and erasure need. It is
// optional: a Store that implements it supports encrypted blobs, purges
// and erasure (both back ends do).
type RetentionStore interface {
	// PutBlobKey stores k unless the tenant holds a live key for k.Sum;
	// it returns the key in force (k, or the existing one), with LastPut
	// set to k.LastPut either way. A removed key is replaced by k: content
	// put again after it expired is new content.
	PutBlobKey(ctx context.Context, k *BlobKey) (*BlobKey, error)
	// GetBlobKey returns tenant's key for sum (live or removed), or
	// ErrNotFound when the tenant never stored the content encrypted.
	GetBlobKey(ctx context.Context, tenant string, sum [32]byte) (*BlobKey, error)
	// RemoveBlobKey destroys tenant's key for sum (keeping its size and
	// the reason), or records a tombstone when there is none (a legacy,
	// unencrypted blob). A key put again after notPutAfter is left alone
	// and ErrConflict is returned: the content is in use again.
	RemoveBlobKey(ctx context.Context, tenant string, sum [32]byte, size int64, reason string, at, notPutAfter time.Time) error

	// RemoveBlob makes tenant's content sum unreadable for good: its data
	// key is destroyed (a tombstone is recorded for a legacy blob) and the
	// stored bytes are deleted from the blob store. Content put again
	// after notPutAfter is in use again: it is left alone and ErrConflict
	// returned. Removing twice is not an error.
	RemoveBlob(ctx context.Context, tenant string, sum [32]byte, size int64, reason string, at, notPutAfter time.Time) error

	// MarkPayloadsRemoved records that run's payloads were removed
	// (reason RemovedExpired or RemovedErased) at at.
	MarkPayloadsRemoved(ctx context.Context, runID, reason string, at time.Time) error
	// PayloadsRemoved returns the reason and time recorded for run, or
	// "" when its payloads are kept.
	PayloadsRemoved(ctx context.Context, runID string) (reason string, at time.Time, err error)

	// EraseRun replaces the payload of each of the run's events by
	// scrub(event) (the events keep their seq, type, step, time and
	// hashes), clears the run's task and result, deletes its pending
	// signals and its prompt hashes, and stores e, all in one transaction. The run must be
	// terminal (ErrConflict otherwise).
	EraseRun(ctx context.Context, e *Erasure, scrub func(*Event) []byte) error
	// Erasures lists a run's erasure records, oldest first.
	Erasures(ctx context.Context, runID string) ([]*Erasure, error)

	// DeleteRun removes a terminal run and everything kept about it (its
	// events, signals, prompt hashes, retention marks, erasure records,
	// webhook deliveries, idempotency keys): the metadata TTL. A run that
	// is not terminal is ErrConflict.
	DeleteRun(ctx context.Context, runID string) error
}

// CheckErasable is what EraseRun checks, inside its transaction, of the
// run it reads: terminal, and its log (read just before) complete.
func CheckErasable(runID, status string, lastSeq int64, evs []Event) error {
	if !Terminal(status) {
		return fmt.Errorf("run %s is %s: cancel it, and erase it once it has ended: %w", runID, status, ErrConflict)
	}
	if int64(len(evs)) != lastSeq {
		return fmt.Errorf("run %s: its log changed while it was read for erasure; try again: %w", runID, ErrConflict)
	}
	return nil
}

// BlobKeyColumns are the columns both SQL stores keep a BlobKey in, in
// the order ScanBlobKey reads them; times are microseconds since the
// epoch, 0 for none, and object is empty for a legacy blob's tombstone.
const BlobKeyColumns = "tenant, sum, size, wrapped, object, created_at, last_put, reason, removed_at"

// ScanBlobKey reads a row of BlobKeyColumns with scan (a row's Scan).
func ScanBlobKey(scan func(dest ...any) error) (*BlobKey, error) {
	var (
		k                           BlobKey
		sum, object                 []byte
		created, lastPut, removedAt int64
	)
	if err := scan(&k.Tenant, &sum, &k.Size, &k.Wrapped, &object, &created, &lastPut, &k.Reason, &removedAt); err != nil {
		return nil, err
	}
	copy(k.Sum[:], sum)
	copy(k.Object[:], object)
	k.CreatedAt, k.LastPut, k.RemovedAt = fromMicros(created), fromMicros(lastPut), fromMicros(removedAt)
	return &k, nil
}

// ObjectColumn is k.Object as stored: empty for none.
func (k *BlobKey) ObjectColumn() []byte {
	if k.Object == ([32]byte{}) {
		return []byte{}
	}
	return k.Object[:]
}

func fromMicros(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMicro(v).UTC()
}
