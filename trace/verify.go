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
// the blobs of that tenant only. When st keeps erasure records
// (store.RetentionStore), the Source is also an Erasures.
func SourceFor(st Stores, tenant string) Source {
	ts := tenantSource{st, st.Blobs(tenant)}
	if rs, ok := st.(store.RetentionStore); ok {
		return erasingSource{ts, rs}
	}
	return ts
}

type tenantSource struct {
	store.EventStore
	store.BlobStore
}

type erasingSource struct {
	tenantSource
	rs store.RetentionStore
}

func (s erasingSource) Erasures(ctx context.Context, runID string) ([]*store.Erasure, error) {
	return s.rs.Erasures(ctx, runID)
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
	// Removed counts the referenced payloads that retention removed
	// (expired) or an erasure destroyed: their hashes and sizes are in the
	// log, their content is gone, by design.
	Removed int `json:"payloads_removed,omitempty"`
	// Erased counts the events whose payloads an erasure replaced, and
	// Erasures are the store's records of those erasures.
	Erased   int              `json:"events_erased,omitempty"`
	Erasures []*store.Erasure `json:"erasures,omitempty"`
	// PromptsUnchecked says why the prompt hashes were not rebuilt (their
	// content was removed).
	PromptsUnchecked string `json:"prompts_unchecked,omitempty"`
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
	erased := map[string]bool{}
	if es, ok := src.(Erasures); ok {
		if rep.Erasures, err = es.Erasures(ctx, runID); err != nil {
			return nil, fmt.Errorf("erasures of run %s: %w", runID, err)
		}
		for _, e := range rep.Erasures {
			erased[e.ID] = true
		}
	}
	c := logCheck{blobs: src, erasures: erased, removedOK: true}
	c.run(ctx, evs)
	rep.Problems, rep.Blobs, rep.Removed, rep.Erased = c.problems, c.nblobs, c.removed, c.erased
	rep.HeadHash = hex.EncodeToString(c.head[:])
	add := func(seq int64, f string, a ...any) {
		rep.Problems = append(rep.Problems, Problem{seq, fmt.Sprintf(f, a...)})
	}
	switch {
	case rep.Erased > 0:
		rep.PromptsUnchecked = fmt.Sprintf("%d events erased", rep.Erased)
		return rep, nil
	case rep.Removed > 0:
		rep.PromptsUnchecked = fmt.Sprintf("%d payloads removed", rep.Removed)
		return rep, nil
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
//
// A log whose payloads were removed or erased (docs/design/retention.md)
// fails it: such a run is never resumed, replayed or copied.
func CheckLog(ctx context.Context, blobs store.BlobStore, evs []store.Event) error {
	c := logCheck{blobs: blobs}
	c.run(ctx, evs)
	if c.ioErr != nil {
		return fmt.Errorf("check log: %w", c.ioErr)
	}
	if len(c.problems) == 0 {
		return nil
	}
	id := ""
	if len(evs) > 0 {
		id = evs[0].RunID
	}
	return &DamageError{RunID: id, Problems: c.problems}
}

// logCheck checks a log. erasures are the erasure ids whose replaced
// payloads are accepted; removedOK accepts removed payloads. It collects
// the problems, the number of distinct blobs (and of removed ones), the
// events erased, the head hash, and the first blob read that failed for
// another reason than the blob being missing or damaged (also a problem).
type logCheck struct {
	blobs     store.BlobStore
	erasures  map[string]bool
	removedOK bool

	problems        []Problem
	nblobs, removed int
	erased          int
	head            [32]byte
	ioErr           error
}

func (c *logCheck) add(seq int64, f string, a ...any) {
	c.problems = append(c.problems, Problem{seq, fmt.Sprintf(f, a...)})
}

func (c *logCheck) run(ctx context.Context, evs []store.Event) {
	var prev [32]byte
	seen := map[string]bool{}
	for i := range evs {
		ev := &evs[i]
		if ev.Seq != int64(i+1) {
			c.add(ev.Seq, "sequence gap: expected %d", i+1)
		}
		if ev.PrevHash != prev {
			c.add(ev.Seq, "previous-hash link broken")
		}
		prev = ev.Hash
		if id := ErasureOf(ev); id != "" && c.erasures[id] {
			c.erased++ // its hash is pinned by the next event's; its content is gone
			continue
		}
		if h := store.ChainHash(ev.PrevHash, ev); h != ev.Hash {
			c.add(ev.Seq, "event hash does not match its content (tampered)")
		}
		refs, err := BlobRefs(ev)
		if err != nil {
			c.add(ev.Seq, "%v", err)
		}
		for _, r := range refs {
			if seen[r.Blob] {
				continue
			}
			seen[r.Blob] = true
			c.nblobs++
			c.blob(ctx, ev.Seq, r)
		}
	}
	c.head = prev
}

// blob checks one referenced blob: present, matching its hash and size.
func (c *logCheck) blob(ctx context.Context, seq int64, r Content) {
	sum, err := r.Sum()
	if err != nil {
		c.add(seq, "%v", err)
		return
	}
	// GetBlob hashes what it reads and refuses bytes that do not match;
	// the check here also covers a store that does not.
	data, err := c.blobs.GetBlob(ctx, sum)
	switch {
	case errors.Is(err, store.ErrRemoved) && c.removedOK:
		c.removed++
	case errors.Is(err, store.ErrCorrupt):
		c.add(seq, "blob %s: content does not match its hash (tampered)", r.Blob[:12])
	case err != nil:
		c.add(seq, "blob %s: %v", r.Blob[:12], err)
		if !errors.Is(err, store.ErrNotFound) && c.ioErr == nil {
			c.ioErr = err
		}
	case sha256.Sum256(data) != sum:
		c.add(seq, "blob %s: content does not match its hash (tampered)", r.Blob[:12])
	case int64(len(data)) != r.Size:
		c.add(seq, "blob %s: size %d, recorded %d", r.Blob[:12], len(data), r.Size)
	}
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

// NextPrompt rebuilds, from a log that ends before a model call, the
// request that call sends (the run's temperature included): what the
// loop's transcript holds at that point, as Prompts would rebuild it once
// the call is recorded.
func NextPrompt(ctx context.Context, src Source, evs []store.Event, noTools bool) (*model.Request, error) {
	tr, rs, err := logTranscript(ctx, src, evs)
	if err != nil {
		return nil, err
	}
	for i := range evs {
		if ErasureOf(&evs[i]) != "" {
			continue
		}
		if evs[i].Type == EvModelCall {
			tr.TakeDelta()
		}
		if err := tr.Add(&evs[i]); err != nil {
			return nil, err
		}
	}
	req := tr.Request(noTools)
	req.Temperature = rs.Temperature
	return req, nil
}

// logTranscript starts the transcript of a log from its run_started
// event (the system prompt and tool definitions loaded from src).
func logTranscript(ctx context.Context, src Source, evs []store.Event) (*Transcript, *RunStarted, error) {
	if len(evs) == 0 || evs[0].Type != EvRunStarted {
		return nil, nil, errors.New("log does not start with run_started")
	}
	var rs RunStarted
	if err := json.Unmarshal(evs[0].Payload, &rs); err != nil {
		return nil, nil, err
	}
	load := loadShown(func(c Content) ([]byte, error) { return Load(ctx, src, c) })
	sys, err := load(rs.System)
	if err != nil {
		return nil, nil, fmt.Errorf("system prompt: %w", err)
	}
	var defs []model.ToolDef
	defsJSON, err := Load(ctx, src, rs.ToolDefs)
	if _, removed := RemovedNote(err); err != nil && !removed {
		return nil, nil, fmt.Errorf("tool definitions: %w", err)
	}
	if err == nil && ErasureOf(&evs[0]) == "" {
		if err := json.Unmarshal(defsJSON, &defs); err != nil {
			return nil, nil, err
		}
	}
	return NewTranscript(string(sys), defs, load), &rs, nil
}

// Prompts rebuilds, from the log alone, the exact request of every model
// call and hands it to fn in order. A payload retention removed reads as
// "[payload expired DATE]" (RemovedNote), so a rebuilt prompt shows where
// the content was; its hash then no longer matches the recorded one.
func Prompts(ctx context.Context, src Source, evs []store.Event, fn func(ev *store.Event, mc *ModelCall, req *model.Request) error) error {
	tr, _, err := logTranscript(ctx, src, evs)
	if err != nil {
		return err
	}
	for i := range evs {
		ev := &evs[i]
		if ErasureOf(ev) != "" {
			continue // an erased event adds nothing to any prompt
		}
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
