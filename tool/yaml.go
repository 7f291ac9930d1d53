package tool

import (
	"encoding/json"
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/agentplane/agentplane/internal/jsoncanon"
)

// This file holds the YAML plumbing of manifest loading: turning a YAML
// mapping (an input schema) into canonical JSON, and turning yaml.v3's
// decoding errors into field paths a manifest author can act on.

// Bounds on a YAML value converted to JSON. Aliases can make a small
// document expand into a huge value, so every visited node is counted.
const (
	maxValueDepth = jsoncanon.MaxDepth
	maxValueNodes = 100_000
	maxValueBytes = 1 << 20 // about the size of the JSON produced
)

// jsonValue is a JSON value written in YAML or JSON, kept as canonical JSON.
type jsonValue struct {
	raw json.RawMessage
}

// UnmarshalYAML converts the node into canonical JSON. Problems are reported
// as a yaml.TypeError so that the decoder reports them with its own.
func (v *jsonValue) UnmarshalYAML(n *yaml.Node) error {
	c := converter{nodes: maxValueNodes, bytes: maxValueBytes}
	val, err := c.value(n, 0)
	if err != nil {
		return &yaml.TypeError{Errors: []string{err.Error()}}
	}
	raw, err := jsoncanon.Marshal(val)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	v.raw = raw
	return nil
}

// UnmarshalJSON keeps the canonical form of data.
func (v *jsonValue) UnmarshalJSON(data []byte) error {
	raw, err := jsoncanon.Canonicalize(data)
	if err != nil {
		return err
	}
	v.raw = raw
	return nil
}

// converter turns YAML nodes into the values encoding/json produces
// (map[string]any, []any, string, json.Number, bool, nil).
type converter struct {
	nodes, bytes int // what may still be produced
}

func (c *converter) value(n *yaml.Node, depth int) (any, error) {
	if depth > maxValueDepth {
		return nil, fmt.Errorf("line %d: nested deeper than %d levels", n.Line, maxValueDepth)
	}
	c.nodes--
	c.bytes -= len(n.Value) + 8
	if c.nodes < 0 || c.bytes < 0 {
		return nil, fmt.Errorf("line %d: value is too large (more than %d elements or %d bytes, after expanding aliases)", n.Line, maxValueNodes, maxValueBytes)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return c.value(n.Content[0], depth)
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, fmt.Errorf("line %d: unresolved alias", n.Line)
		}
		return c.value(n.Alias, depth+1)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: mapping keys must be strings", k.Line)
			}
			if k.ShortTag() == "!!merge" {
				return nil, fmt.Errorf("line %d: merge keys (<<) are not supported", k.Line)
			}
			if _, dup := m[k.Value]; dup {
				return nil, fmt.Errorf("line %d: key %q appears twice", k.Line, k.Value)
			}
			val, err := c.value(v, depth+1)
			if err != nil {
				return nil, err
			}
			m[k.Value] = val
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, e := range n.Content {
			val, err := c.value(e, depth+1)
			if err != nil {
				return nil, err
			}
			s = append(s, val)
		}
		return s, nil
	case yaml.ScalarNode:
		return scalarValue(n)
	}
	return nil, fmt.Errorf("line %d: unsupported YAML node", n.Line)
}

func scalarValue(n *yaml.Node) (any, error) {
	switch tag := n.ShortTag(); tag {
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, fmt.Errorf("line %d: %v", n.Line, err)
		}
		return b, nil
	case "!!int", "!!float":
		var x any
		if err := n.Decode(&x); err != nil {
			return nil, fmt.Errorf("line %d: %v", n.Line, err)
		}
		b, err := json.Marshal(x)
		if err != nil {
			return nil, fmt.Errorf("line %d: %s is not a JSON number", n.Line, n.Value)
		}
		return json.Number(b), nil
	case "!!str", "!!timestamp":
		return n.Value, nil
	default:
		return nil, fmt.Errorf("line %d: unsupported YAML tag %s", n.Line, tag)
	}
}

// stringList is a YAML or JSON value that is either one string or a list of
// strings.
type stringList []string

func (s *stringList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			*s = nil
			return nil
		}
		*s = stringList{n.Value}
		return nil
	case yaml.SequenceNode:
		out := make(stringList, 0, len(n.Content))
		for _, e := range n.Content {
			if e.Kind != yaml.ScalarNode {
				return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: expected a string", e.Line)}}
			}
			out = append(out, e.Value)
		}
		*s = out
		return nil
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: expected a string or a list of strings", n.Line)}}
}

func (s *stringList) UnmarshalJSON(data []byte) error {
	var one string
	if err := json.Unmarshal(data, &one); err == nil {
		*s = stringList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(data, &many); err != nil {
		return fmt.Errorf("expected a string or a list of strings")
	}
	*s = many
	return nil
}
