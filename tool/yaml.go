package tool

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

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

// A yamlIssue is one problem yaml.v3 reported while decoding a document.
type yamlIssue struct {
	Line    int
	Field   string
	Problem string
}

var (
	reIssueLine = regexp.MustCompile(`^line (\d+): (.*)$`)
	reUnknown   = regexp.MustCompile(`^field (.+) not found in type \S+$`)
	reUnmarshal = regexp.MustCompile("^cannot unmarshal !!(\\w+)(?: `(.*)`)? into (.+)$")
	reDupKey    = regexp.MustCompile(`^mapping key (".*") already defined at line (\d+)$`)
)

// yamlIssues explains the messages of a yaml.TypeError, locating each in
// the document's node tree.
func yamlIssues(doc *yaml.Node, msgs []string) []yamlIssue {
	out := make([]yamlIssue, 0, len(msgs))
	for _, msg := range msgs {
		m := reIssueLine.FindStringSubmatch(msg)
		if m == nil {
			out = append(out, yamlIssue{Problem: msg})
			continue
		}
		line, _ := strconv.Atoi(m[1])
		text := m[2]
		is := yamlIssue{Line: line, Problem: text}
		switch {
		case reUnknown.MatchString(text):
			name := reUnknown.FindStringSubmatch(text)[1]
			is.Field = keyAt(doc, line, name)
			if is.Field == "" {
				is.Field = name
			}
			is.Problem = "unknown field"
		case reDupKey.MatchString(text):
			sm := reDupKey.FindStringSubmatch(text)
			name, err := strconv.Unquote(sm[1])
			if err != nil {
				name = sm[1]
			}
			is.Field = keyAt(doc, line, name)
			is.Problem = fmt.Sprintf("appears twice (first at line %s)", sm[2])
		case reUnmarshal.MatchString(text):
			sm := reUnmarshal.FindStringSubmatch(text)
			is.Field = valueAt(doc, line, sm[2])
			got := yamlKind(sm[1])
			if sm[2] != "" {
				got += " " + strconv.Quote(sm[2])
			}
			is.Problem = fmt.Sprintf("expected %s, got %s", goKind(sm[3]), got)
		default:
			is.Field = valueAt(doc, line, "")
		}
		out = append(out, is)
	}
	return out
}

func yamlKind(tag string) string {
	switch tag {
	case "str":
		return "string"
	case "int":
		return "integer"
	case "float":
		return "number"
	case "seq":
		return "list"
	case "map":
		return "mapping"
	}
	return tag
}

// goKind describes a Go type from a yaml.v3 message in YAML terms.
func goKind(t string) string {
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["):
		return "a mapping"
	case strings.HasPrefix(t, "*"):
		return goKind(t[1:])
	}
	switch t {
	case "int", "int64", "int32", "uint", "uint64":
		return "an integer"
	case "float64", "float32":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	}
	return "a mapping"
}

// walkYAML calls fn for every mapping value and sequence element under n
// with its field path (a.b[2].c). Aliases are not followed.
func walkYAML(n *yaml.Node, path string, depth int, fn func(path string, key, val *yaml.Node) bool) bool {
	if n == nil || depth > maxValueDepth {
		return true
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if !walkYAML(c, path, depth, fn) {
				return false
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			if !fn(p, k, v) || !walkYAML(v, p, depth+1, fn) {
				return false
			}
		}
	case yaml.SequenceNode:
		for i, e := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if !fn(p, nil, e) || !walkYAML(e, p, depth+1, fn) {
				return false
			}
		}
	}
	return true
}

// keyAt returns the path of the mapping key name written at line.
func keyAt(doc *yaml.Node, line int, name string) string {
	found := ""
	walkYAML(doc, "", 0, func(p string, k, _ *yaml.Node) bool {
		if k != nil && k.Line == line && k.Value == name {
			found = p
			return false
		}
		return true
	})
	return found
}

// valueAt returns the path of the value at line, preferring a scalar whose
// text matches value (yaml.v3 shortens long values to a prefix and "...").
func valueAt(doc *yaml.Node, line int, value string) string {
	prefix, shortened := strings.CutSuffix(value, "...")
	var exact, deepest string
	depth := -1
	walkYAML(doc, "", 0, func(p string, _, v *yaml.Node) bool {
		if v.Line != line {
			return true
		}
		if value != "" && v.Kind == yaml.ScalarNode &&
			(v.Value == value || shortened && strings.HasPrefix(v.Value, prefix)) {
			exact = p
			return false
		}
		if d := strings.Count(p, ".") + strings.Count(p, "["); d > depth {
			deepest, depth = p, d
		}
		return true
	})
	if exact != "" {
		return exact
	}
	return deepest
}

// lineOf returns the line where the field at path is written, or 0.
func lineOf(doc *yaml.Node, path string) int {
	line := 0
	walkYAML(doc, "", 0, func(p string, k, v *yaml.Node) bool {
		if p != path {
			return true
		}
		if k != nil {
			line = k.Line
		} else {
			line = v.Line
		}
		return false
	})
	return line
}

// scalarField returns the text of the top-level scalar field key of doc.
func scalarField(doc *yaml.Node, key string) string {
	if doc == nil || doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return ""
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key && m.Content[i+1].Kind == yaml.ScalarNode {
			return m.Content[i+1].Value
		}
	}
	return ""
}

// emptyDocument reports whether doc holds nothing (a bare "---").
func emptyDocument(doc *yaml.Node) bool {
	if doc.Kind != yaml.DocumentNode {
		return doc.Kind == 0
	}
	if len(doc.Content) == 0 {
		return true
	}
	c := doc.Content[0]
	return c.Kind == yaml.ScalarNode && c.ShortTag() == "!!null"
}

// mappingDocument reports whether doc is a document holding a mapping.
func mappingDocument(doc *yaml.Node) bool {
	return doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode
}
