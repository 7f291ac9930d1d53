// Package yamlissue turns yaml.v3's decoding errors into the field paths and
// lines a human can act on, for the strict parsers of agent definitions and
// tool manifests (and anything else that decodes YAML written by people).
package yamlissue

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// MaxDepth bounds how deep the node walkers below descend.
const MaxDepth = 64

// An Issue is one problem yaml.v3 reported while decoding a document.
type Issue struct {
	Line    int
	Field   string
	Problem string
}

var (
	reIssueLine = regexp.MustCompile(`^line (\d+): (.*)$`)
	reUnknown   = regexp.MustCompile(`^field (.+) not found in type \S+$`)
	reUnmarshal = regexp.MustCompile("^cannot unmarshal !!(\\w+)(?: `(.*)`)? into (.+)$")
	reDupKey    = regexp.MustCompile(`^mapping key (".*") already defined at line (\d+)$`)
	reKeyIssue  = regexp.MustCompile(`^key (".*"): (.*)$`)
)

// Issues explains the messages of a yaml.TypeError, locating each in
// the document's node tree.
func Issues(doc *yaml.Node, msgs []string) []Issue {
	out := make([]Issue, 0, len(msgs))
	for _, msg := range msgs {
		m := reIssueLine.FindStringSubmatch(msg)
		if m == nil {
			out = append(out, Issue{Problem: msg})
			continue
		}
		line, _ := strconv.Atoi(m[1])
		text := m[2]
		is := Issue{Line: line, Problem: text}
		switch {
		case reUnknown.MatchString(text):
			name := reUnknown.FindStringSubmatch(text)[1]
			is.Field = KeyAt(doc, line, name)
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
			is.Field = KeyAt(doc, line, name)
			is.Problem = fmt.Sprintf("appears twice (first at line %s)", sm[2])
		case reKeyIssue.MatchString(text):
			// Written by this package's own unmarshalers.
			sm := reKeyIssue.FindStringSubmatch(text)
			name, err := strconv.Unquote(sm[1])
			if err != nil {
				name = sm[1]
			}
			is.Field = KeyAt(doc, line, name)
			is.Problem = sm[2]
		case reUnmarshal.MatchString(text):
			sm := reUnmarshal.FindStringSubmatch(text)
			is.Field = ValueAt(doc, line, sm[2])
			got := yamlKind(sm[1])
			if sm[2] != "" {
				got += " " + strconv.Quote(sm[2])
			}
			is.Problem = fmt.Sprintf("expected %s, got %s", goKind(sm[3]), got)
		default:
			is.Field = ValueAt(doc, line, "")
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

// Walk calls fn for every mapping value and sequence element under n
// with its field path (a.b[2].c). Aliases are not followed.
func Walk(n *yaml.Node, path string, depth int, fn func(path string, key, val *yaml.Node) bool) bool {
	if n == nil || depth > MaxDepth {
		return true
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if !Walk(c, path, depth, fn) {
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
			if !fn(p, k, v) || !Walk(v, p, depth+1, fn) {
				return false
			}
		}
	case yaml.SequenceNode:
		for i, e := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if !fn(p, nil, e) || !Walk(e, p, depth+1, fn) {
				return false
			}
		}
	}
	return true
}

// KeyAt returns the path of the mapping key name written at line.
func KeyAt(doc *yaml.Node, line int, name string) string {
	found := ""
	Walk(doc, "", 0, func(p string, k, _ *yaml.Node) bool {
		if k != nil && k.Line == line && k.Value == name {
			found = p
			return false
		}
		return true
	})
	return found
}

// ValueAt returns the path of the value at line, preferring a scalar whose
// text matches value (yaml.v3 shortens long values to a prefix and "...").
func ValueAt(doc *yaml.Node, line int, value string) string {
	prefix, shortened := strings.CutSuffix(value, "...")
	var exact, deepest string
	depth := -1
	Walk(doc, "", 0, func(p string, _, v *yaml.Node) bool {
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

// LineOf returns the line where the field at path is written, or 0.
func LineOf(doc *yaml.Node, path string) int {
	line := 0
	Walk(doc, "", 0, func(p string, k, v *yaml.Node) bool {
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

// ScalarField returns the text of the top-level scalar field key of doc.
func ScalarField(doc *yaml.Node, key string) string {
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

// EmptyDocument reports whether doc holds nothing (a bare "---").
func EmptyDocument(doc *yaml.Node) bool {
	if doc.Kind != yaml.DocumentNode {
		return doc.Kind == 0
	}
	if len(doc.Content) == 0 {
		return true
	}
	c := doc.Content[0]
	return c.Kind == yaml.ScalarNode && c.ShortTag() == "!!null"
}

// MappingDocument reports whether doc is a document holding a mapping.
func MappingDocument(doc *yaml.Node) bool {
	return doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode
}

// SplitLine separates yaml.v3's "line N: " prefix from a message; line is
// 0 when the message has none.
func SplitLine(msg string) (line int, rest string) {
	m := reIssueLine.FindStringSubmatch(msg)
	if m == nil {
		return 0, msg
	}
	line, _ = strconv.Atoi(m[1])
	return line, m[2]
}
