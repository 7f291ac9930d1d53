package mcphost

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/agentplane/agentplane/internal/jsoncanon"
	"github.com/agentplane/agentplane/redact"
)

// Limits on what a server lists: everything a server sends is bounded
// before it is kept.
const (
	MaxTools             = 512
	maxToolDescription   = 8 << 10
	maxToolSchemaBytes   = 64 << 10
	maxSnapshotJSONBytes = 8 << 20
)

// ToolDef is one tool as a server listed it: the parts a reviewer approves
// and a model would see. Schemas are canonical JSON.
type ToolDef struct {
	Name         string          `json:"name"`
	Title        string          `json:"title,omitempty"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
}

// Snapshot is a server's tool list, sorted by name: the reviewed one is
// pinned in the connector, a live one is compared with it.
type Snapshot struct {
	Tools []ToolDef `json:"tools"`
}

// NewSnapshot builds a snapshot from listed tools, refusing what the
// platform cannot hold: too many tools, a repeated or invalid name, an
// oversized description or schema, a schema that is not a JSON object.
func NewSnapshot(tools []ToolDef) (*Snapshot, error) {
	if len(tools) > MaxTools {
		return nil, fmt.Errorf("the server lists %d tools; at most %d are accepted", len(tools), MaxTools)
	}
	s := &Snapshot{Tools: make([]ToolDef, 0, len(tools))}
	seen := map[string]bool{}
	for _, t := range tools {
		if !reMCPToolName(t.Name) {
			return nil, fmt.Errorf("the server lists a tool whose name is not a valid MCP tool name (%q)", redactName(t.Name))
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("the server lists tool %q twice", t.Name)
		}
		seen[t.Name] = true
		if len(t.Description) > maxToolDescription || len(t.Title) > 512 {
			return nil, fmt.Errorf("tool %q: description or title longer than the platform accepts (%d bytes)", t.Name, maxToolDescription)
		}
		var err error
		if t.InputSchema, err = canonSchema(t.InputSchema, true); err != nil {
			return nil, fmt.Errorf("tool %q: inputSchema: %w", t.Name, err)
		}
		if t.OutputSchema, err = canonSchema(t.OutputSchema, false); err != nil {
			return nil, fmt.Errorf("tool %q: outputSchema: %w", t.Name, err)
		}
		s.Tools = append(s.Tools, t)
	}
	slices.SortFunc(s.Tools, func(a, b ToolDef) int { return strings.Compare(a.Name, b.Name) })
	return s, nil
}

func canonSchema(raw json.RawMessage, required bool) (json.RawMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		if required {
			return nil, fmt.Errorf("missing")
		}
		return nil, nil
	}
	if len(raw) > maxToolSchemaBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxToolSchemaBytes)
	}
	c, err := jsoncanon.Canonicalize(raw)
	if err != nil {
		return nil, err
	}
	if c[0] != '{' {
		return nil, fmt.Errorf("not a JSON object")
	}
	return c, nil
}

func reMCPToolName(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

func redactName(s string) string {
	out, _ := redact.Sanitize(s, false)
	if len(out) > 64 {
		out = out[:64] + "…"
	}
	return out
}

// CanonicalJSON is the snapshot as stored and hashed.
func (s *Snapshot) CanonicalJSON() []byte {
	b, err := jsoncanon.Marshal(s)
	if err != nil {
		return nil // unreachable: schemas are canonical JSON already
	}
	return b
}

// Hash is the hex sha256 of the canonical JSON.
func (s *Snapshot) Hash() string {
	h := sha256.Sum256(s.CanonicalJSON())
	return hex.EncodeToString(h[:])
}

// SnapshotFromJSON reads a stored snapshot.
func SnapshotFromJSON(data []byte) (*Snapshot, error) {
	if len(data) > maxSnapshotJSONBytes {
		return nil, fmt.Errorf("snapshot larger than %d bytes", maxSnapshotJSONBytes)
	}
	var s Snapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("stored snapshot: %w", err)
	}
	return NewSnapshot(s.Tools)
}

// Get returns the named tool.
func (s *Snapshot) Get(name string) (ToolDef, bool) {
	if s == nil {
		return ToolDef{}, false
	}
	i, ok := slices.BinarySearchFunc(s.Tools, name, func(t ToolDef, n string) int { return strings.Compare(t.Name, n) })
	if !ok {
		return ToolDef{}, false
	}
	return s.Tools[i], true
}

// Change kinds of a Diff.
const (
	ChangeAdded   = "added"
	ChangeRemoved = "removed"
	ChangeChanged = "changed"
)

// Change is one difference between a reviewed and a live snapshot.
type Change struct {
	Tool string `json:"tool"`
	Kind string `json:"kind"`
	// Fields lists what changed (description, title, input_schema,
	// output_schema) for a changed tool.
	Fields []string `json:"fields,omitempty"`
	// Reviewed and Live are the two versions (nil for the side that has
	// none). Their text is the server's: untrusted.
	Reviewed *ToolDef `json:"reviewed,omitempty"`
	Live     *ToolDef `json:"live,omitempty"`
}

// Diff lists what differs from reviewed (nil: never reviewed) to live, by
// tool name.
func Diff(reviewed, live *Snapshot) []Change {
	var out []Change
	if reviewed == nil {
		reviewed = &Snapshot{}
	}
	for _, r := range reviewed.Tools {
		l, ok := live.Get(r.Name)
		if !ok {
			out = append(out, Change{Tool: r.Name, Kind: ChangeRemoved, Reviewed: ptr(r)})
			continue
		}
		if f := changedFields(r, l); len(f) > 0 {
			out = append(out, Change{Tool: r.Name, Kind: ChangeChanged, Fields: f, Reviewed: ptr(r), Live: ptr(l)})
		}
	}
	for _, l := range live.Tools {
		if _, ok := reviewed.Get(l.Name); !ok {
			out = append(out, Change{Tool: l.Name, Kind: ChangeAdded, Live: ptr(l)})
		}
	}
	slices.SortStableFunc(out, func(a, b Change) int { return strings.Compare(a.Tool, b.Tool) })
	return out
}

func ptr[T any](v T) *T { return &v }

func changedFields(a, b ToolDef) []string {
	var f []string
	if a.Title != b.Title {
		f = append(f, "title")
	}
	if a.Description != b.Description {
		f = append(f, "description")
	}
	if string(a.InputSchema) != string(b.InputSchema) {
		f = append(f, "input_schema")
	}
	if string(a.OutputSchema) != string(b.OutputSchema) {
		f = append(f, "output_schema")
	}
	return f
}

// Quarantined returns the names of reviewed tools that must not be used
// against live: those removed from the server or changed there. (A tool
// only the live server has was never reviewed, so no manifest offers it.)
func Quarantined(reviewed, live *Snapshot) map[string]string {
	q := map[string]string{}
	for _, c := range Diff(reviewed, live) {
		switch c.Kind {
		case ChangeRemoved:
			q[c.Tool] = "the server no longer lists it"
		case ChangeChanged:
			q[c.Tool] = "its " + strings.Join(c.Fields, ", ") + " on the server differ from the reviewed snapshot"
		}
	}
	return q
}

// ReviewerText renders server text for a person: control, escape and
// bidirectional characters removed, bounded. It is shown as text, never
// interpreted.
func ReviewerText(s string) string {
	out, _ := redact.Sanitize(s, true)
	if len(out) > maxToolDescription {
		out = out[:maxToolDescription] + "…"
	}
	return out
}
