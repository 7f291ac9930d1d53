package trace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentplane/agentplane/store"
)

// An erased event keeps its sequence number, type, step, time and both
// hashes; its payload is replaced by {"erased":"ERASURE-ID"}. Its stored
// hash can no longer be recomputed, but the next event's hash covers it
// (every event hashes its predecessor's hash), so the chain still proves
// the order and number of events and that nothing else changed; Verify
// accepts the replacement only for an erasure the store records for the
// run (docs/design/retention.md).

// ErasedPayload is the payload that replaces an erased event's.
func ErasedPayload(erasureID string) []byte {
	b, _ := json.Marshal(struct {
		Erased string `json:"erased"`
	}{erasureID})
	return b
}

// ErasureOf returns the erasure id of an erased event, or "".
func ErasureOf(ev *store.Event) string {
	if !bytes.HasPrefix(ev.Payload, []byte(`{"erased":`)) {
		return ""
	}
	var m map[string]json.RawMessage
	var id string
	if json.Unmarshal(ev.Payload, &m) != nil || len(m) != 1 || json.Unmarshal(m["erased"], &id) != nil {
		return ""
	}
	return id
}

// RemovedNote is how a removed payload is shown where its content was:
// "payload expired 2026-12-01" or "payload erased 2026-12-01"; ok is false
// for any other error.
func RemovedNote(err error) (note string, ok bool) {
	var re *store.RemovedError
	if !errors.As(err, &re) {
		return "", false
	}
	return fmt.Sprintf("payload %s %s", re.Reason, re.At.UTC().Format(time.DateOnly)), true
}

// loadShown is Load for display: a removed payload reads as its note in
// brackets.
func loadShown(load func(Content) ([]byte, error)) func(Content) ([]byte, error) {
	return func(c Content) ([]byte, error) {
		b, err := load(c)
		if note, ok := RemovedNote(err); ok {
			return []byte("[" + note + "]"), nil
		}
		return b, err
	}
}

// Erasures is a Source that knows the erasures of its runs (the Source of
// a store that implements store.RetentionStore does).
type Erasures interface {
	Erasures(ctx context.Context, runID string) ([]*store.Erasure, error)
}
