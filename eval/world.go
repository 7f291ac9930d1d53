package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentplane/agentplane/tool"
)

// A World is a simulated environment an agent's eval set runs in: a bank,
// an IT service desk, whatever the agent's tools act on. An example or a
// team implements it outside this package; package eval knows nothing of
// what a world holds. A World must be safe for concurrent use: tasks open
// their environments in parallel.
type World interface {
	// Name is what an eval set's `world:` field names.
	Name() string
	// Tools names the tier-1 tools the world simulates. Evals refuse to
	// start when the agent version is granted any other tool.
	Tools() []string
	// Variables names the variables ("customer.email") that matchers may
	// refer to as $customer.email; each fixture gives their values.
	Variables() []string
	// Records names the kinds of record a run can leave in the world
	// ("refunds") and, for each, the fields a record has. A task's
	// expect.world lists records of these kinds.
	Records() map[string][]string
	// Fixture parses a task's `world:` mapping (JSON, numbers as written
	// in the set) strictly. raw is nil for a recorded run that matches no
	// task: the world's seed state, with variables taken from the text if
	// the world can. Errors that concern one field are FieldErrors, so
	// the set can name the line.
	Fixture(raw json.RawMessage, text string) (Fixture, error)
	// Open builds a fresh environment for a fixture in dir, a directory
	// of its own that the environment may fill.
	Open(ctx context.Context, dir string, fx Fixture) (Env, error)
}

// Fixture is one task's state of a world, as its World parsed it.
type Fixture interface {
	// Vars gives every name of World.Variables a value.
	Vars() map[string]string
}

// Env is one environment of a world: its tools, registered into the
// catalog of the task's platform, act on it alone.
type Env interface {
	// Register adds the world's simulated tier-1 tools (World.Tools).
	Register(c *tool.Catalog) error
	// Records returns what run runID left in the world, by kind
	// (World.Records), as JSON-shaped values (string, json.Number, bool,
	// nil, []any, map[string]any).
	Records(ctx context.Context, runID string) (map[string][]map[string]any, error)
	// Close releases the environment; its directory is removed by eval.
	Close() error
}

// FieldError is an error about one field of a fixture, at Path
// ("transactions[0].amount_inr"), relative to the task's `world:`.
type FieldError struct {
	Path string
	Err  error
}

func (e *FieldError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// FieldErrorf makes a FieldError.
func FieldErrorf(path, format string, args ...any) error {
	return &FieldError{Path: path, Err: fmt.Errorf(format, args...)}
}

// nodeJSON turns a YAML node into JSON, keeping numbers as written (so a
// world can refuse 23.505 rupees) and refusing what JSON cannot hold.
func nodeJSON(n *yaml.Node) (json.RawMessage, error) {
	var b strings.Builder
	if err := writeJSON(&b, n, 0); err != nil {
		return nil, err
	}
	return json.RawMessage(b.String()), nil
}

func writeJSON(b *strings.Builder, n *yaml.Node, depth int) error {
	n = resolveAlias(n)
	if n == nil {
		b.WriteString("null")
		return nil
	}
	if depth > 32 {
		return errors.New("nested too deeply")
	}
	switch n.Kind {
	case yaml.MappingNode:
		b.WriteByte('{')
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
				return fmt.Errorf("line %d: keys must be plain names", k.Line)
			}
			if seen[k.Value] {
				return fmt.Errorf("line %d: %s given twice", k.Line, k.Value)
			}
			seen[k.Value] = true
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k.Value)
			b.Write(kb)
			b.WriteByte(':')
			if err := writeJSON(b, n.Content[i+1], depth+1); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, e := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJSON(b, e, depth+1); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			b.WriteString("null")
		case "!!bool":
			v, err := strconv.ParseBool(strings.ToLower(n.Value))
			if err != nil {
				return fmt.Errorf("line %d: %q is not a boolean", n.Line, n.Value)
			}
			b.WriteString(strconv.FormatBool(v))
		case "!!int", "!!float":
			// Numbers as written, when JSON can say them so.
			if !json.Valid([]byte(n.Value)) {
				return fmt.Errorf("line %d: %q: write the number in decimal", n.Line, n.Value)
			}
			b.WriteString(n.Value)
		default:
			sb, _ := json.Marshal(n.Value)
			b.Write(sb)
		}
	default:
		return fmt.Errorf("line %d: unsupported YAML", n.Line)
	}
	return nil
}

// lineOf finds the line of path ("a.b[2].c") under n, or n's own line
// when the path leads nowhere.
func lineOf(n *yaml.Node, path string) int {
	line := n.Line
	cur := resolveAlias(n)
	for _, part := range splitPath(path) {
		if cur == nil {
			break
		}
		next := (*yaml.Node)(nil)
		if idx, err := strconv.Atoi(part); err == nil && cur.Kind == yaml.SequenceNode {
			if idx >= 0 && idx < len(cur.Content) {
				next = cur.Content[idx]
			}
		} else if cur.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(cur.Content); i += 2 {
				if cur.Content[i].Value == part {
					line = cur.Content[i].Line
					next = cur.Content[i+1]
				}
			}
		}
		if next == nil {
			break
		}
		cur = resolveAlias(next)
		if cur.Line > 0 && cur.Kind != yaml.ScalarNode {
			line = cur.Line
		}
	}
	return line
}

// splitPath splits "a.b[2].c" into a, b, 2, c.
func splitPath(path string) []string {
	var out []string
	for _, seg := range strings.Split(path, ".") {
		for seg != "" {
			i := strings.IndexByte(seg, '[')
			if i < 0 {
				out = append(out, seg)
				break
			}
			if i > 0 {
				out = append(out, seg[:i])
			}
			j := strings.IndexByte(seg[i:], ']')
			if j < 0 {
				break
			}
			out = append(out, seg[i+1:i+j])
			seg = seg[i+j+1:]
		}
	}
	return out
}
