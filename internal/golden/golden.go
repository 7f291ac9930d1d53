// Package golden reads and writes golden logs: the complete record of runs
// made by one agentplane version (run rows, every event with its sequence,
// type, step, time, payload and hashes, every blob the events reference, and
// the pinned agent versions and tool manifests), frozen as test fixtures.
// The golden test imports each fixture into a fresh embedded store and
// checks that `trace`, `trace verify` and a deterministic re-run of the
// loop still work on it, so an audit record written by an older agentplane
// stays readable and verifiable by a newer one (docs/design/golden-logs.md).
//
// A fixture is a directory, laid out for review in a diff:
//
//	fixture.json               format, name, description, what recorded it, the runs, agents and tools
//	runs/RUN.json              the run row (status, counters, result, parent run, bindings)
//	runs/RUN.events.jsonl      one event per line; the payload last, byte for byte as stored
//	agents/NAME@VERSION.json   the pinned agent version's canonical spec, byte for byte
//	tools/SHA256.json          each pinned tool manifest, byte for byte
//	blobs/SHA256               each referenced blob, byte for byte
//
// Every byte a hash covers is kept verbatim: event payloads are written
// without re-encoding, blobs, specs and manifests as files of their own.
package golden

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// Format names the fixture layout this package reads and writes.
const Format = "agentplane-golden-log/1"

// timeLayout keeps the microseconds an event time is hashed with.
const timeLayout = "2006-01-02T15:04:05.000000Z07:00"

// Fixture is a set of recorded runs with everything needed to read them.
type Fixture struct {
	Name        string
	Description string
	// RecordedWith names the agentplane source the runs were recorded by
	// (a commit).
	RecordedWith string
	// Runs are in import order: an original before its replays.
	Runs   []Run
	Agents []store.AgentVersion
	Tools  []store.ToolRecord
	Blobs  map[[32]byte][]byte
}

// Run is one recorded run: its row and its whole log.
type Run struct {
	Row    store.Run
	Events []store.Event
}

// Find returns the run with id, or nil.
func (f *Fixture) Find(id string) *Run {
	for i := range f.Runs {
		if f.Runs[i].Row.ID == id {
			return &f.Runs[i]
		}
	}
	return nil
}

// Export reads runs and everything they reference from a store. The
// original of a replay is included (before it) even when not named.
func Export(ctx context.Context, st store.Store, name, description, recordedWith string, runIDs ...string) (*Fixture, error) {
	f := &Fixture{Name: name, Description: description, RecordedWith: recordedWith, Blobs: map[[32]byte][]byte{}}
	seenRun := map[string]bool{}
	seenTool := map[[32]byte]bool{}
	seenAgent := map[string]bool{}
	var add func(id string) error
	add = func(id string) error {
		if seenRun[id] {
			return nil
		}
		seenRun[id] = true
		row, err := st.GetRun(ctx, id)
		if err != nil {
			return err
		}
		if !store.Terminal(row.Status) {
			return fmt.Errorf("golden: run %s is %s; only ended runs are frozen", id, row.Status)
		}
		if row.ParentRunID != "" {
			if err := add(row.ParentRunID); err != nil {
				return err
			}
		}
		evs, err := st.Events(ctx, id, 0, 0)
		if err != nil {
			return err
		}
		if len(evs) == 0 || evs[0].Type != trace.EvRunStarted {
			return fmt.Errorf("golden: run %s has no run_started event", id)
		}
		for i := range evs {
			if err := checkPayload(&evs[i]); err != nil {
				return err
			}
			refs, err := trace.BlobRefs(&evs[i])
			if err != nil {
				return fmt.Errorf("golden: run %s seq %d: %w", id, evs[i].Seq, err)
			}
			for _, c := range refs {
				sum, err := c.Sum()
				if err != nil {
					return fmt.Errorf("golden: run %s seq %d: %w", id, evs[i].Seq, err)
				}
				if _, ok := f.Blobs[sum]; ok {
					continue
				}
				data, err := st.GetBlob(ctx, sum)
				if err != nil {
					return fmt.Errorf("golden: run %s seq %d: %w", id, evs[i].Seq, err)
				}
				f.Blobs[sum] = data
			}
		}
		var rs trace.RunStarted
		if err := json.Unmarshal(evs[0].Payload, &rs); err != nil {
			return fmt.Errorf("golden: run %s run_started: %w", id, err)
		}
		for _, ref := range rs.Tools {
			sum, err := (trace.Content{Blob: ref.Hash}).Sum()
			if err != nil {
				return fmt.Errorf("golden: run %s pins tool %s: %w", id, ref.Name, err)
			}
			if seenTool[sum] {
				continue
			}
			seenTool[sum] = true
			rec, err := st.GetToolByHash(ctx, sum)
			if err != nil {
				return fmt.Errorf("golden: run %s pins tool %s: %w", id, ref.Name, err)
			}
			f.Tools = append(f.Tools, store.ToolRecord{Name: rec.Name, Manifest: rec.Manifest, Hash: rec.Hash})
		}
		key := fmt.Sprintf("%s@%d", rs.Agent, rs.AgentVersion)
		if !seenAgent[key] {
			seenAgent[key] = true
			av, err := st.GetAgentVersion(ctx, rs.Agent, rs.AgentVersion)
			if err != nil {
				return fmt.Errorf("golden: run %s pins agent %s: %w", id, key, err)
			}
			f.Agents = append(f.Agents, store.AgentVersion{Name: av.Name, Version: av.Version, Spec: av.Spec, SpecHash: av.SpecHash})
		}
		f.Runs = append(f.Runs, Run{Row: frozenRow(row), Events: evs})
		return nil
	}
	for _, id := range runIDs {
		if err := add(id); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// frozenRow keeps the fields of a run row that a record means; the lease
// and the time of the last update belong to the store that held it.
func frozenRow(r *store.Run) store.Run {
	return store.Run{ID: r.ID, Tenant: r.Tenant, User: r.User, Agent: r.Agent, AgentVersion: r.AgentVersion, Task: r.Task,
		Mode: r.Mode, Status: r.Status, CreatedAt: r.CreatedAt.UTC(), LastSeq: r.LastSeq, Steps: r.Steps,
		InputTokens: r.InputTokens, OutputTokens: r.OutputTokens, CostMicros: r.CostMicros, Currency: r.Currency,
		CostUnknown: r.CostUnknown, Result: r.Result, ParentRunID: r.ParentRunID, Bindings: r.Bindings}
}

// checkPayload refuses a payload the line format cannot keep verbatim.
func checkPayload(ev *store.Event) error {
	if !json.Valid(ev.Payload) || bytes.ContainsAny(ev.Payload, "\r\n") {
		return fmt.Errorf("golden: run %s seq %d: payload is not single-line JSON", ev.RunID, ev.Seq)
	}
	return nil
}

// Import writes a fixture into a store through its public interfaces:
// manifests, agent versions and blobs first, then each run imported as
// ended with its recorded events, status and counters (engine.ImportRun;
// hashes as recorded, not recomputed: verifying them is trace verify's job). A blob whose bytes do not match its name is
// refused.
func Import(ctx context.Context, st store.Store, f *Fixture) error {
	for i := range f.Tools {
		t := f.Tools[i]
		if err := st.PutTool(ctx, &t); err != nil {
			return fmt.Errorf("golden: tool %s: %w", t.Name, err)
		}
	}
	for i := range f.Agents {
		a := f.Agents[i]
		if _, err := st.PutAgentVersion(ctx, &a); err != nil {
			return fmt.Errorf("golden: agent %s@%d: %w", a.Name, a.Version, err)
		}
	}
	for _, sum := range sortedSums(f.Blobs) {
		got, err := st.PutBlob(ctx, f.Blobs[sum])
		if err != nil {
			return err
		}
		if got != sum {
			return fmt.Errorf("golden: blob %x: content does not match its name", sum[:6])
		}
	}
	for i := range f.Runs {
		r := &f.Runs[i]
		if err := engine.ImportRun(ctx, st, &r.Row, r.Events); err != nil {
			return fmt.Errorf("golden: %w", err)
		}
	}
	return nil
}

func sortedSums(m map[[32]byte][]byte) [][32]byte {
	out := make([][32]byte, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i][:], out[j][:]) < 0 })
	return out
}

// The files' JSON shapes.
type (
	fixtureFile struct {
		Format       string      `json:"format"`
		Name         string      `json:"name"`
		Description  string      `json:"description"`
		RecordedWith string      `json:"recorded_with,omitempty"`
		Runs         []string    `json:"runs"`
		Agents       []agentFile `json:"agents"`
		Tools        []toolFile  `json:"tools"`
		Blobs        int         `json:"blobs"`
	}
	agentFile struct {
		Name       string `json:"name"`
		Version    int    `json:"version"`
		SpecSHA256 string `json:"spec_sha256"`
	}
	toolFile struct {
		Name   string `json:"name"`
		SHA256 string `json:"sha256"`
	}
	runFile struct {
		ID           string            `json:"id"`
		Tenant       string            `json:"tenant"`
		User         string            `json:"user"`
		Agent        string            `json:"agent"`
		AgentVersion int               `json:"agent_version"`
		Task         string            `json:"task"`
		Mode         string            `json:"mode"`
		Status       string            `json:"status"`
		CreatedAt    string            `json:"created_at"`
		LastSeq      int64             `json:"last_seq"`
		Steps        int               `json:"steps"`
		InputTokens  int64             `json:"input_tokens"`
		OutputTokens int64             `json:"output_tokens"`
		CostMicros   int64             `json:"cost_micros"`
		Currency     string            `json:"currency"`
		CostUnknown  bool              `json:"cost_unknown"`
		Result       string            `json:"result"`
		ParentRunID  string            `json:"parent_run_id,omitempty"`
		Bindings     map[string]string `json:"bindings,omitempty"`
	}
	// eventLine is one line of events.jsonl; Payload is written last and
	// verbatim.
	eventLine struct {
		Seq      int64           `json:"seq"`
		Type     string          `json:"type"`
		Step     int             `json:"step"`
		At       string          `json:"at"`
		PrevHash string          `json:"prev_hash"`
		Hash     string          `json:"hash"`
		Payload  json.RawMessage `json:"payload"`
	}
)

var safeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Write stores f in dir, which must not exist yet: a golden set is written
// once and never rewritten.
func Write(dir string, f *Fixture) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("golden: %s exists; golden logs are never rewritten (record a new set)", dir)
	}
	subs := []string{"runs", "agents", "tools"}
	if len(f.Blobs) > 0 {
		subs = append(subs, "blobs") // git keeps no empty directory
	}
	for _, sub := range subs {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return err
		}
	}
	ff := fixtureFile{Format: Format, Name: f.Name, Description: f.Description, RecordedWith: f.RecordedWith, Blobs: len(f.Blobs)}
	for i := range f.Runs {
		r := &f.Runs[i]
		if !safeName.MatchString(r.Row.ID) {
			return fmt.Errorf("golden: run id %q is not a safe file name", r.Row.ID)
		}
		ff.Runs = append(ff.Runs, r.Row.ID)
		row := r.Row
		rf := runFile{ID: row.ID, Tenant: row.Tenant, User: row.User, Agent: row.Agent, AgentVersion: row.AgentVersion,
			Task: row.Task, Mode: row.Mode, Status: row.Status, CreatedAt: row.CreatedAt.UTC().Format(timeLayout), LastSeq: row.LastSeq,
			Steps: row.Steps, InputTokens: row.InputTokens, OutputTokens: row.OutputTokens, CostMicros: row.CostMicros,
			Currency: row.Currency, CostUnknown: row.CostUnknown, Result: row.Result, ParentRunID: row.ParentRunID, Bindings: row.Bindings}
		if err := writeJSON(filepath.Join(dir, "runs", row.ID+".json"), rf); err != nil {
			return err
		}
		var buf bytes.Buffer
		for j := range r.Events {
			ev := &r.Events[j]
			if err := checkPayload(ev); err != nil {
				return err
			}
			head, _ := json.Marshal(eventLine{Seq: ev.Seq, Type: ev.Type, Step: ev.Step, At: ev.At.UTC().Format(timeLayout),
				PrevHash: hex.EncodeToString(ev.PrevHash[:]), Hash: hex.EncodeToString(ev.Hash[:])})
			// Replace the null placeholder with the payload's own bytes.
			head = bytes.TrimSuffix(head, []byte(`"payload":null}`))
			buf.Write(head)
			buf.WriteString(`"payload":`)
			buf.Write(ev.Payload)
			buf.WriteString("}\n")
		}
		if err := os.WriteFile(filepath.Join(dir, "runs", row.ID+".events.jsonl"), buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	for _, a := range f.Agents {
		if !safeName.MatchString(a.Name) {
			return fmt.Errorf("golden: agent name %q is not a safe file name", a.Name)
		}
		ff.Agents = append(ff.Agents, agentFile{Name: a.Name, Version: a.Version, SpecSHA256: hex.EncodeToString(a.SpecHash[:])})
		if err := os.WriteFile(filepath.Join(dir, "agents", fmt.Sprintf("%s@%d.json", a.Name, a.Version)), a.Spec, 0o644); err != nil {
			return err
		}
	}
	for _, t := range f.Tools {
		h := hex.EncodeToString(t.Hash[:])
		ff.Tools = append(ff.Tools, toolFile{Name: t.Name, SHA256: h})
		if err := os.WriteFile(filepath.Join(dir, "tools", h+".json"), t.Manifest, 0o644); err != nil {
			return err
		}
	}
	for _, sum := range sortedSums(f.Blobs) {
		if err := os.WriteFile(filepath.Join(dir, "blobs", hex.EncodeToString(sum[:])), f.Blobs[sum], 0o644); err != nil {
			return err
		}
	}
	return writeJSON(filepath.Join(dir, "fixture.json"), ff)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Read loads the fixture in dir. It checks the layout and that every
// agent spec, manifest and blob file is what its name says; it does not
// check the event chain (trace verify does, after Import).
func Read(dir string) (*Fixture, error) {
	var ff fixtureFile
	if err := readJSON(filepath.Join(dir, "fixture.json"), &ff); err != nil {
		return nil, err
	}
	if ff.Format != Format {
		return nil, fmt.Errorf("golden: %s: format %q, this reader knows %q", dir, ff.Format, Format)
	}
	f := &Fixture{Name: ff.Name, Description: ff.Description, RecordedWith: ff.RecordedWith, Blobs: map[[32]byte][]byte{}}
	for _, id := range ff.Runs {
		if !safeName.MatchString(id) {
			return nil, fmt.Errorf("golden: run id %q is not a safe file name", id)
		}
		var rf runFile
		if err := readJSON(filepath.Join(dir, "runs", id+".json"), &rf); err != nil {
			return nil, err
		}
		created, err := time.Parse(timeLayout, rf.CreatedAt)
		if err != nil {
			return nil, fmt.Errorf("golden: run %s created_at: %w", id, err)
		}
		r := Run{Row: store.Run{ID: rf.ID, Tenant: rf.Tenant, User: rf.User, Agent: rf.Agent, AgentVersion: rf.AgentVersion,
			Task: rf.Task, Mode: rf.Mode, Status: rf.Status, CreatedAt: created, LastSeq: rf.LastSeq, Steps: rf.Steps,
			InputTokens: rf.InputTokens, OutputTokens: rf.OutputTokens, CostMicros: rf.CostMicros, Currency: rf.Currency,
			CostUnknown: rf.CostUnknown, Result: rf.Result, ParentRunID: rf.ParentRunID, Bindings: rf.Bindings}}
		if r.Row.ID != id {
			return nil, fmt.Errorf("golden: runs/%s.json holds run %q", id, r.Row.ID)
		}
		if r.Events, err = readEvents(filepath.Join(dir, "runs", id+".events.jsonl"), id); err != nil {
			return nil, err
		}
		f.Runs = append(f.Runs, r)
	}
	for _, a := range ff.Agents {
		if !safeName.MatchString(a.Name) {
			return nil, fmt.Errorf("golden: agent name %q is not a safe file name", a.Name)
		}
		spec, err := os.ReadFile(filepath.Join(dir, "agents", fmt.Sprintf("%s@%d.json", a.Name, a.Version)))
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(spec)
		if hex.EncodeToString(sum[:]) != a.SpecSHA256 {
			return nil, fmt.Errorf("golden: agent %s@%d: spec does not match its recorded hash", a.Name, a.Version)
		}
		f.Agents = append(f.Agents, store.AgentVersion{Name: a.Name, Version: a.Version, Spec: spec, SpecHash: sum})
	}
	for _, t := range ff.Tools {
		sum, err := (trace.Content{Blob: t.SHA256}).Sum()
		if err != nil {
			return nil, fmt.Errorf("golden: tool %s: %w", t.Name, err)
		}
		m, err := os.ReadFile(filepath.Join(dir, "tools", t.SHA256+".json"))
		if err != nil {
			return nil, err
		}
		if sha256.Sum256(m) != sum {
			return nil, fmt.Errorf("golden: tool %s: manifest does not match its name", t.Name)
		}
		f.Tools = append(f.Tools, store.ToolRecord{Name: t.Name, Manifest: m, Hash: sum})
	}
	ents, err := os.ReadDir(filepath.Join(dir, "blobs"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range ents {
		sum, err := (trace.Content{Blob: e.Name()}).Sum()
		if err != nil {
			return nil, fmt.Errorf("golden: blobs/%s: %w", e.Name(), err)
		}
		data, err := os.ReadFile(filepath.Join(dir, "blobs", e.Name()))
		if err != nil {
			return nil, err
		}
		// Not checked against the name here: Import refuses a mismatch, and
		// a test may want to hand a tampered blob to it.
		f.Blobs[sum] = data
	}
	if len(f.Blobs) != ff.Blobs {
		return nil, fmt.Errorf("golden: %s holds %d blobs, fixture.json says %d", dir, len(f.Blobs), ff.Blobs)
	}
	return f, nil
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("golden: %s: %w", path, err)
	}
	return nil
}

func readEvents(path, runID string) ([]store.Event, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	var out []store.Event
	for n := 1; sc.Scan(); n++ {
		var l eventLine
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return nil, fmt.Errorf("golden: %s line %d: %w", path, n, err)
		}
		at, err := time.Parse(timeLayout, l.At)
		if err != nil {
			return nil, fmt.Errorf("golden: %s line %d: %w", path, n, err)
		}
		ev := store.Event{RunID: runID, Seq: l.Seq, Type: l.Type, Step: l.Step, At: at.UTC(), Payload: []byte(l.Payload)}
		if err := decodeHash(l.PrevHash, &ev.PrevHash); err != nil {
			return nil, fmt.Errorf("golden: %s line %d prev_hash: %w", path, n, err)
		}
		if err := decodeHash(l.Hash, &ev.Hash); err != nil {
			return nil, fmt.Errorf("golden: %s line %d hash: %w", path, n, err)
		}
		out = append(out, ev)
	}
	return out, sc.Err()
}

func decodeHash(s string, dst *[32]byte) error {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		return fmt.Errorf("bad hash %q", strings.TrimSpace(s))
	}
	copy(dst[:], b)
	return nil
}
