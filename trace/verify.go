package trace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/store"
)

// Source is what observability replay reads: run logs and the blobs of
// one tenant, the tenant of the runs read (SourceFor).
type Source interface {
	store.EventStore
	store.BlobStore
}

// Stores hold run logs and every tenant's blobs (a store.Store does).
type Stores interface {
	store.EventStore
	store.Blobs
}

// SourceFor returns the Source of tenant's runs in st: their events, and
// the blobs of that tenant only.
func SourceFor(st Stores, tenant string) Source {
	return tenantSource{st, st.Blobs(tenant)}
}

type tenantSource struct {
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

// Verify checks a run's log: everything CheckLog checks (sequence numbers,
// the hash chain, every referenced blob), and every recorded prompt hash
// reproduced by rebuilding the prompt from the log.
func Verify(ctx context.Context, src Source, runID string) (*Report, error) {
	evs, err := src.Events(ctx, runID, 0, 0)
	if err != nil {
		return nil, err
	}
	rep := &Report{RunID: runID, Events: len(evs)}
	if len(evs) == 0 {
		return rep, fmt.Errorf("run %s has no events: %w", runID, store.ErrNotFound)
	}
	var head [32]byte
	rep.Problems, rep.Blobs, head, _ = checkLog(ctx, src, evs)
	rep.HeadHash = hex.EncodeToString(head[:])
	add := func(seq int64, f string, a ...any) {
		rep.Problems = append(rep.Problems, Problem{seq, fmt.Sprintf(f, a...)})
	}
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

// ErrDamaged is wrapped by CheckLog's error: a log that fails it must not be
// acted on.
var ErrDamaged = errors.New("run log damaged")

// DamageError lists what CheckLog found wrong with a log.
type DamageError struct {
	RunID    string
	Problems []Problem
}

func (e *DamageError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: run %s:", ErrDamaged, e.RunID)
	for i, p := range e.Problems {
		if i == 3 {
			fmt.Fprintf(&b, " (and %d more)", len(e.Problems)-i)
			break
		}
		if i > 0 {
			b.WriteByte(';')
		}
		fmt.Fprintf(&b, " seq %d: %s", p.Seq, p.Detail)
	}
	return b.String()
}

func (e *DamageError) Unwrap() error { return ErrDamaged }

// CheckLog is what a worker checks before it resumes a run from its log
// (engine does, on every load): sequence numbers contiguous from 1, every
// hash link and every event hash recomputed, and every blob the log
// references (BlobRefs) present, of its recorded size and matching its hash.
// A log that fails is returned as a *DamageError wrapping ErrDamaged; a
// blob store that could not answer (neither found damage nor the blob
// missing) is returned as that error, so a passing outage is not taken for
// tampering.
func CheckLog(ctx context.Context, blobs store.BlobStore, evs []store.Event) error {
	problems, _, _, ioErr := checkLog(ctx, blobs, evs)
	if ioErr != nil {
		return fmt.Errorf("check log: %w", ioErr)
	}
	if len(problems) == 0 {
		return nil
	}
	id := ""
	if len(evs) > 0 {
		id = evs[0].RunID
	}
	return &DamageError{RunID: id, Problems: problems}
}

// checkLog returns the problems found, the number of distinct blobs, the
// head hash, and the first blob read that failed for another reason than
// the blob being missing or damaged (it is also listed as a problem).
func checkLog(ctx context.Context, blobs store.BlobStore, evs []store.Event) (problems []Problem, nblobs int, head [32]byte, ioErr error) {
	add := func(seq int64, f string, a ...any) {
		problems = append(problems, Problem{seq, fmt.Sprintf(f, a...)})
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
		refs, err := BlobRefs(ev)
		if err != nil {
			add(ev.Seq, "%v", err)
		}
		for _, c := range refs {
			if seen[c.Blob] {
				continue
			}
			seen[c.Blob] = true
			nblobs++
			sum, err := c.Sum()
			if err != nil {
				add(ev.Seq, "%v", err)
				continue
			}
			// GetBlob hashes what it reads and refuses bytes that do not
			// match; the check here also covers a store that does not.
			data, err := blobs.GetBlob(ctx, sum)
			switch {
			case errors.Is(err, store.ErrCorrupt):
				add(ev.Seq, "blob %s: content does not match its hash (tampered)", c.Blob[:12])
			case err != nil:
				add(ev.Seq, "blob %s: %v", c.Blob[:12], err)
				if !errors.Is(err, store.ErrNotFound) && ioErr == nil {
					ioErr = err
				}
			case sha256.Sum256(data) != sum:
				add(ev.Seq, "blob %s: content does not match its hash (tampered)", c.Blob[:12])
			case int64(len(data)) != c.Size:
				add(ev.Seq, "blob %s: size %d, recorded %d", c.Blob[:12], len(data), c.Size)
			}
		}
	}
	return problems, nblobs, prev, ioErr
}

// BlobRefs returns the blob references the platform recorded in ev: the
// Content fields of the payload types that have them (run_started's system
// prompt and tool definitions, tool_attempt and approval_requested
// arguments, tool_result output, compaction notes). Only these count as a
// run's blobs — for verification, for resuming and for who may read a blob
// — because only the platform writes them, with hashes of content it
// stored itself. A "blob" key anywhere else (in model output, tool
// arguments, a message) is text a caller or a model chose, and names
// nothing. Every Content field added to an event payload must be listed
// here.
func BlobRefs(ev *store.Event) ([]Content, error) {
	var cs []Content
	var err error
	switch ev.Type {
	case EvRunStarted:
		var p RunStarted
		err = json.Unmarshal(ev.Payload, &p)
		cs = []Content{p.System, p.ToolDefs}
	case EvToolAttempt:
		var p ToolAttempt
		err = json.Unmarshal(ev.Payload, &p)
		cs = []Content{p.Args}
	case EvToolResult:
		var p ToolResult
		err = json.Unmarshal(ev.Payload, &p)
		cs = []Content{p.Output}
	case EvApprovalReq:
		var p ApprovalRequested
		err = json.Unmarshal(ev.Payload, &p)
		cs = []Content{p.Args}
	case EvCompaction:
		var p Compaction
		err = json.Unmarshal(ev.Payload, &p)
		cs = []Content{p.Note}
	case EvToolsLoaded:
		var p ToolsLoaded
		err = json.Unmarshal(ev.Payload, &p)
		cs = []Content{p.Defs}
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s payload: %w", ev.Type, err)
	}
	out := cs[:0]
	for _, c := range cs {
		if c.IsBlob() {
			out = append(out, c)
		}
	}
	return out, nil
}

// RunBlobs returns the hashes of the blobs evs refer to (BlobRefs), once
// each, in the order first named: the blobs a copy of the run must carry
// into the run's tenant.
func RunBlobs(evs []store.Event) ([][32]byte, error) {
	var out [][32]byte
	seen := map[[32]byte]bool{}
	for i := range evs {
		refs, err := BlobRefs(&evs[i])
		if err != nil {
			return nil, fmt.Errorf("seq %d: %w", evs[i].Seq, err)
		}
		for _, c := range refs {
			sum, err := c.Sum()
			if err != nil {
				return nil, fmt.Errorf("seq %d: %w", evs[i].Seq, err)
			}
			if !seen[sum] {
				seen[sum] = true
				out = append(out, sum)
			}
		}
	}
	return out, nil
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
