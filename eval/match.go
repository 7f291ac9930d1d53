package eval

import (
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// A matcher tests one JSON value, as decoded with json.Decoder.UseNumber:
// string, json.Number, bool, nil, []any or map[string]any. present is
// false for a field the value does not have at all.
type matcher interface {
	match(v any, present bool) bool
	String() string
}

// Operators a matcher mapping may use. Several in one mapping must all
// hold. An object is matched field by field with "fields" (the arguments
// of a call and the records in the world are matched that way without it).
var operators = []string{"all_of", "any_of", "contains", "fields", "max", "min", "not", "prefix", "present", "suffix"}

type (
	litString struct{ s string }
	litNumber struct{ r *big.Rat }
	litBool   struct{ b bool }
	litNull   struct{}
	// varRef is a variable before binding.
	varRef  struct{ name string }
	listM   struct{ elems []matcher }
	objectM struct{ fields map[string]matcher }
	boundM  struct {
		max bool
		r   *big.Rat
	}
	stringOpM struct{ op, s string }
	notM      struct{ m matcher }
	anyOfM    struct{ ms []matcher }
	allOfM    struct{ ms []matcher }
	presentM  struct{ want bool }
)

func (m litString) match(v any, present bool) bool {
	s, ok := v.(string)
	return present && ok && s == m.s
}
func (m litString) String() string { return fmt.Sprintf("%q", m.s) }
func (m litNumber) match(v any, present bool) bool {
	r, ok := number(v)
	return present && ok && r.Cmp(m.r) == 0
}
func (m litNumber) String() string               { return m.r.FloatString(2) }
func (m litBool) match(v any, present bool) bool { b, ok := v.(bool); return present && ok && b == m.b }
func (m litBool) String() string                 { return fmt.Sprint(m.b) }
func (litNull) match(v any, present bool) bool   { return present && v == nil }
func (litNull) String() string                   { return "null" }
func (m varRef) match(any, bool) bool            { return false } // never evaluated: bound first
func (m varRef) String() string                  { return m.name }

func (m listM) match(v any, present bool) bool {
	xs, ok := v.([]any)
	if !present || !ok || len(xs) != len(m.elems) {
		return false
	}
	// Order does not matter: find a one-to-one assignment.
	used := make([]bool, len(xs))
	var assign func(i int) bool
	assign = func(i int) bool {
		if i == len(m.elems) {
			return true
		}
		for j, x := range xs {
			if !used[j] && m.elems[i].match(x, true) {
				used[j] = true
				if assign(i + 1) {
					return true
				}
				used[j] = false
			}
		}
		return false
	}
	return assign(0)
}

func (m listM) String() string {
	parts := make([]string, len(m.elems))
	for i, e := range m.elems {
		parts[i] = e.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func (m objectM) match(v any, present bool) bool {
	obj, ok := v.(map[string]any)
	if !present || !ok {
		return false
	}
	for _, k := range sortedKeys(m.fields) {
		fv, has := obj[k]
		if !m.fields[k].match(fv, has) {
			return false
		}
	}
	return true
}

func (m objectM) String() string {
	var parts []string
	for _, k := range sortedKeys(m.fields) {
		parts = append(parts, k+": "+m.fields[k].String())
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func (m boundM) match(v any, present bool) bool {
	r, ok := number(v)
	if !present || !ok {
		return false
	}
	if m.max {
		return r.Cmp(m.r) <= 0
	}
	return r.Cmp(m.r) >= 0
}

func (m boundM) String() string {
	if m.max {
		return "≤ " + m.r.FloatString(2)
	}
	return "≥ " + m.r.FloatString(2)
}

func (m stringOpM) match(v any, present bool) bool {
	s, ok := v.(string)
	if !present || !ok {
		return false
	}
	switch m.op {
	case "prefix":
		return strings.HasPrefix(s, m.s)
	case "suffix":
		return strings.HasSuffix(s, m.s)
	default:
		return strings.Contains(s, m.s)
	}
}

func (m stringOpM) String() string            { return fmt.Sprintf("%s %q", m.op, m.s) }
func (m notM) match(v any, present bool) bool { return !m.m.match(v, present) }
func (m notM) String() string                 { return "not " + m.m.String() }

func (m anyOfM) match(v any, present bool) bool {
	for _, x := range m.ms {
		if x.match(v, present) {
			return true
		}
	}
	return false
}

func (m anyOfM) String() string { return "any of " + listM{m.ms}.String() }

func (m allOfM) match(v any, present bool) bool {
	for _, x := range m.ms {
		if !x.match(v, present) {
			return false
		}
	}
	return true
}

func (m allOfM) String() string                   { return "all of " + listM{m.ms}.String() }
func (m presentM) match(_ any, present bool) bool { return present == m.want }
func (m presentM) String() string {
	if m.want {
		return "present"
	}
	return "absent"
}

// number reads a JSON number (or a Go number) exactly.
func number(v any) (*big.Rat, bool) {
	switch n := v.(type) {
	case json.Number:
		return new(big.Rat).SetString(n.String())
	case int64:
		return new(big.Rat).SetInt64(n), true
	case int:
		return new(big.Rat).SetInt64(int64(n)), true
	}
	return nil, false
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// parseMatcher reads a matcher from YAML. at names the field for errors.
func (p *parser) parseMatcher(n *yaml.Node, at string) matcher {
	n = resolveAlias(n)
	switch n.Kind {
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			if strings.HasPrefix(n.Value, "$") {
				// Variables are the world's (World.Variables).
				i := sort.SearchStrings(p.vars, n.Value)
				if i == len(p.vars) || p.vars[i] != n.Value {
					p.errAt(n, at, "unknown variable %s (known: %s)", n.Value, strings.Join(p.vars, ", "))
					return litNull{}
				}
				return varRef{n.Value}
			}
			return litString{n.Value}
		case "!!int", "!!float":
			r, ok := new(big.Rat).SetString(n.Value)
			if !ok {
				p.errAt(n, at, "%q is not a number", n.Value)
				return litNull{}
			}
			return litNumber{r}
		case "!!bool":
			return litBool{n.Value == "true" || n.Value == "True" || n.Value == "TRUE"}
		case "!!null":
			return litNull{}
		}
		// Dates and the like: compare as the text written.
		return litString{n.Value}
	case yaml.SequenceNode:
		var m listM
		for i, e := range n.Content {
			m.elems = append(m.elems, p.parseMatcher(e, fmt.Sprintf("%s[%d]", at, i)))
		}
		return m
	case yaml.MappingNode:
		fields := p.mapping(n, at, operators)
		if len(n.Content) == 0 {
			p.errAt(n, at, "empty matcher (want a value, a list, or one of %s)", strings.Join(operators, ", "))
			return litNull{}
		}
		if len(fields) == 0 {
			return litNull{} // reported by mapping
		}
		var all []matcher
		for _, k := range sortedKeys(fields) {
			v, kat := fields[k], at+"."+k
			switch k {
			case "max", "min":
				r, ok := new(big.Rat).SetString(resolveAlias(v).Value)
				if resolveAlias(v).Kind != yaml.ScalarNode || !ok {
					p.errAt(v, kat, "want a number")
					continue
				}
				all = append(all, boundM{max: k == "max", r: r})
			case "prefix", "suffix", "contains":
				s, ok := p.str(v, kat)
				if ok {
					all = append(all, stringOpM{k, s})
				}
			case "not":
				all = append(all, notM{p.parseMatcher(v, kat)})
			case "any_of", "all_of":
				v = resolveAlias(v)
				if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
					p.errAt(v, kat, "want a non-empty list of matchers")
					continue
				}
				var ms []matcher
				for i, e := range v.Content {
					ms = append(ms, p.parseMatcher(e, fmt.Sprintf("%s[%d]", kat, i)))
				}
				if k == "any_of" {
					all = append(all, anyOfM{ms})
				} else {
					all = append(all, allOfM{ms})
				}
			case "fields":
				all = append(all, p.parseFields(v, kat))
			case "present":
				b, ok := p.boolean(v, kat)
				if ok {
					all = append(all, presentM{b})
				}
			}
		}
		if len(all) == 1 {
			return all[0]
		}
		return allOfM{all}
	}
	p.errAt(n, at, "want a value, a list or a mapping")
	return litNull{}
}

// parseFields reads an object matcher: each named field must match.
func (p *parser) parseFields(n *yaml.Node, at string) matcher {
	o := objectM{fields: map[string]matcher{}}
	for k, v := range p.mapping(n, at, nil) {
		o.fields[k] = p.parseMatcher(v, at+"."+k)
	}
	return o
}

// bind replaces variables by their values.
func bind(m matcher, vars map[string]string) matcher {
	switch x := m.(type) {
	case varRef:
		return litString{vars[x.name]}
	case listM:
		out := listM{make([]matcher, len(x.elems))}
		for i, e := range x.elems {
			out.elems[i] = bind(e, vars)
		}
		return out
	case objectM:
		out := objectM{map[string]matcher{}}
		for k, v := range x.fields {
			out.fields[k] = bind(v, vars)
		}
		return out
	case notM:
		return notM{bind(x.m, vars)}
	case anyOfM:
		out := anyOfM{make([]matcher, len(x.ms))}
		for i, e := range x.ms {
			out.ms[i] = bind(e, vars)
		}
		return out
	case allOfM:
		out := allOfM{make([]matcher, len(x.ms))}
		for i, e := range x.ms {
			out.ms[i] = bind(e, vars)
		}
		return out
	}
	return m
}

// decodeJSON decodes a JSON document for matching (numbers kept exact).
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}
