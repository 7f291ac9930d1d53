package agent

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// This file turns yaml.v3's decoding errors into field paths a definition
// author can act on. It mirrors the helpers of package tool; both could
// move to one internal package.

// maxYAMLDepth bounds how deep the node walkers below descend.
const maxYAMLDepth = 64

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
	reKeyIssue  = regexp.MustCompile(`^key (".*"): (.*)$`)
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
		case reKeyIssue.MatchString(text):
			// Written by this package's own unmarshalers.
			sm := reKeyIssue.FindStringSubmatch(text)
			name, err := strconv.Unquote(sm[1])
			if err != nil {
				name = sm[1]
			}
			is.Field = keyAt(doc, line, name)
			is.Problem = sm[2]
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
	if n == nil || depth > maxYAMLDepth {
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
