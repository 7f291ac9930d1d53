package trace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/store"
)

// Source is what observability replay reads.
type Source interface {
	store.EventStore
	store.BlobStore
}

// Problem is one integrity failure found by Verify.
type Problem struct {
	Seq    int64  `json:"seq"`
	Detail string `json:"detail"`
}

// Report is the result of Verify.
type Report struct {
	RunID    string    `json:"run_id"`
	Events   int       `json:"events"`
	Blobs    int       `json:"blobs"`
	Prompts  int       `json:"prompts"`
	Problems []Problem `json:"problems,omitempty"`
	HeadHash string    `json:"head_hash"`
}

// OK reports whether nothing was wrong.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Verify checks a run's log: sequence numbers contiguous from 1, every hash
// chained and recomputed, every referenced blob present with the right hash
// and size, and every recorded prompt hash reproduced by rebuilding the
// prompt from the log.
func Verify(ctx context.Context, src Source, runID string) (*Report, error) {
	evs, err := src.Events(ctx, runID, 0, 0)
	if err != nil {
		return nil, err
	}
	rep := &Report{RunID: runID, Events: len(evs)}
	if len(evs) == 0 {
		return rep, fmt.Errorf("run %s has no events: %w", runID, store.ErrNotFound)
	}
	add := func(seq int64, f string, a ...any) {
		rep.Problems = append(rep.Problems, Problem{seq, fmt.Sprintf(f, a...)})
	}
	var prev [32]byte
	seen := map[string]bool{}
	for i := range evs {
		ev := &evs[i]
		if ev.Seq != int64(i+1) {
			add(ev.Seq, "sequence gap: expected %d", i+1)
		}
		if ev.PrevHash != prev {
			add(ev.Seq, "previous-hash link broken")
		}
		if h := store.ChainHash(ev.PrevHash, ev); h != ev.Hash {
			add(ev.Seq, "event hash does not match its content (tampered)")
		}
		prev = ev.Hash
		for _, c := range BlobRefs(ev.Payload) {
			if seen[c.Blob] {
				continue
			}
			seen[c.Blob] = true
			rep.Blobs++
			sum, err := c.Sum()
			if err != nil {
				add(ev.Seq, "%v", err)
				continue
			}
			data, err := src.GetBlob(ctx, sum)
			if err != nil {
				add(ev.Seq, "blob %s: %v", c.Blob[:12], err)
				continue
			}
			if sha256.Sum256(data) != sum {
				add(ev.Seq, "blob %s: content does not match its hash (tampered)", c.Blob[:12])
			}
			if int64(len(data)) != c.Size {
				add(ev.Seq, "blob %s: size %d, recorded %d", c.Blob[:12], len(data), c.Size)
			}
		}
	}
	rep.HeadHash = hex.EncodeToString(prev[:])
	err = Prompts(ctx, src, evs, func(ev *store.Event, mc *ModelCall, req *model.Request) error {
		rep.Prompts++
		if h, _ := PromptHash(req); h != mc.PromptHash {
			add(ev.Seq, "rebuilt prompt does not match the recorded prompt hash")
		}
		return nil
	})
	if err != nil {
		add(0, "rebuild prompts: %v", err)
	}
	return rep, nil
}

// BlobRefs finds every Content-shaped object with a blob reference in an
// event payload (the blobs Verify checks and a golden log must carry).
func BlobRefs(payload []byte) []Content {
	if !bytes.Contains(payload, []byte(`"blob"`)) {
		return nil
	}
	var v any
	if err := json.Unmarshal(payload, &v); err != nil {
		return nil
	}
	var out []Content
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if b, ok := x["blob"].(string); ok {
				size, _ := x["size"].(float64)
				out = append(out, Content{Blob: b, Size: int64(size)})
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

// Prompts rebuilds, from the log alone, the exact request of every model
// call and hands it to fn in order.
func Prompts(ctx context.Context, src Source, evs []store.Event, fn func(ev *store.Event, mc *ModelCall, req *model.Request) error) error {
	if len(evs) == 0 || evs[0].Type != EvRunStarted {
		return errors.New("log does not start with run_started")
	}
	var rs RunStarted
	if err := json.Unmarshal(evs[0].Payload, &rs); err != nil {
		return err
	}
	sys, err := Load(ctx, src, rs.System)
	if err != nil {
		return fmt.Errorf("system prompt: %w", err)
	}
	defsJSON, err := Load(ctx, src, rs.ToolDefs)
	if err != nil {
		return fmt.Errorf("tool definitions: %w", err)
	}
	var defs []model.ToolDef
	if err := json.Unmarshal(defsJSON, &defs); err != nil {
		return err
	}
	tr := NewTranscript(string(sys), defs, func(c Content) ([]byte, error) { return Load(ctx, src, c) })
	for i := range evs {
		ev := &evs[i]
		if ev.Type == EvModelCall {
			var mc ModelCall
			if err := json.Unmarshal(ev.Payload, &mc); err != nil {
				return err
			}
			req := tr.Request(mc.NoTools)
			tr.TakeDelta()
			if err := fn(ev, &mc, req); err != nil {
				return err
			}
		}
		if err := tr.Add(ev); err != nil {
			return err
		}
	}
	return nil
}
