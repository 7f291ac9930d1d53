// Package toolsearch ranks an agent's searchable tools against a query for
// the loop's built-in search_tools tool: Okapi BM25 over each tool's name,
// description, and argument names and descriptions.
//
// It is small and deterministic on purpose. Documents are tokenised the
// same way as queries (snake_case, camelCase, kebab-case and digits split,
// lower case, a short stop list, plural and -ing/-ed endings folded), the
// name counts more than the description, and ties are broken by name, so
// the same catalogue and query always give the same ranking. The loop
// records the ranking in the run's log (trace.ToolsLoaded); nothing
// searches again on replay.
//
// Text indexed here is untrusted (a team's or a server's description): it
// is only counted, never interpreted. The caller decides what may be
// indexed: only reviewed, offerable tools the user may use.
package toolsearch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/agentplane/agentplane/model"
)

// Limits.
const (
	// MaxQueryBytes bounds a query; longer ones are cut at a rune boundary.
	MaxQueryBytes = 512
	// MaxQueryTerms bounds the distinct terms a query is scored with.
	MaxQueryTerms = 32
	// MaxLimit bounds how many hits one search returns.
	MaxLimit = 10
	// DefaultLimit is the number of hits when the caller gives none.
	DefaultLimit = 5

	maxDocBytes    = 64 << 10
	maxSchemaProps = 128
	maxSchemaDepth = 4
	nameWeight     = 3 // a name's terms count as three occurrences
	k1             = 1.2
	b              = 0.75
)

// Doc is one searchable tool.
type Doc struct {
	Name        string
	Description string
	// Args are the input schema's properties, nested ones included.
	Args []Arg
}

// Arg is one argument of a tool.
type Arg struct {
	Name        string
	Description string
}

// DocOf builds a Doc from a tool's name, description and JSON Schema of its
// input. A schema that does not parse contributes nothing.
func DocOf(name, description string, inputSchema json.RawMessage) Doc {
	d := Doc{Name: name, Description: description}
	var root any
	if json.Unmarshal(inputSchema, &root) == nil {
		d.Args = schemaArgs(root, 0, nil)
	}
	return d
}

// schemaArgs collects property names and descriptions, depth first in
// sorted key order, bounded in depth and count.
func schemaArgs(node any, depth int, out []Arg) []Arg {
	obj, ok := node.(map[string]any)
	if !ok || depth > maxSchemaDepth {
		return out
	}
	if props, ok := obj["properties"].(map[string]any); ok {
		keys := make([]string, 0, len(props))
		for k := range props {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if len(out) >= maxSchemaProps {
				return out
			}
			desc := ""
			if p, ok := props[k].(map[string]any); ok {
				desc, _ = p["description"].(string)
			}
			out = append(out, Arg{Name: k, Description: desc})
			out = schemaArgs(props[k], depth+1, out)
		}
	}
	if items, ok := obj["items"]; ok {
		out = schemaArgs(items, depth+1, out)
	}
	return out
}

// Hit is one ranked tool.
type Hit struct {
	Name  string
	Score float64
}

// Index is an immutable BM25 index. Safe for concurrent use.
type Index struct {
	names  []string
	tf     []map[string]int // per document
	length []int
	df     map[string]int
	avgLen float64
}

// New indexes docs. Names should be unique; a repeated name is indexed
// once (the first).
func New(docs []Doc) *Index {
	ix := &Index{df: map[string]int{}}
	seen := map[string]bool{}
	total := 0
	for _, d := range docs {
		if seen[d.Name] {
			continue
		}
		seen[d.Name] = true
		tf := map[string]int{}
		n := 0
		for _, t := range Tokens(d.Name) {
			tf[t] += nameWeight
			n += nameWeight
		}
		text := d.Description
		for _, a := range d.Args {
			text += " " + a.Name + " " + a.Description
		}
		if len(text) > maxDocBytes {
			text = cut(text, maxDocBytes)
		}
		for _, t := range Tokens(text) {
			tf[t]++
			n++
		}
		for t := range tf {
			ix.df[t]++
		}
		ix.names = append(ix.names, d.Name)
		ix.tf = append(ix.tf, tf)
		ix.length = append(ix.length, n)
		total += n
	}
	if len(ix.names) > 0 {
		ix.avgLen = float64(total) / float64(len(ix.names))
	}
	return ix
}

// Len is the number of indexed tools.
func (ix *Index) Len() int { return len(ix.names) }

// Search returns at most limit tools (DefaultLimit when limit < 1, at most
// MaxLimit) that match at least one query term, best first; equal scores
// are ordered by name. keep, when not nil, filters candidates before they
// are ranked (the caller's grants and the user's scopes).
func (ix *Index) Search(query string, limit int, keep func(name string) bool) []Hit {
	if limit < 1 {
		limit = DefaultLimit
	}
	limit = min(limit, MaxLimit)
	terms := queryTerms(query)
	if len(terms) == 0 || len(ix.names) == 0 {
		return nil
	}
	n := float64(len(ix.names))
	var hits []Hit
	for i, name := range ix.names {
		if keep != nil && !keep(name) {
			continue
		}
		score := 0.0
		for _, t := range terms {
			f := ix.tf[i][t]
			if f == 0 {
				continue
			}
			df := float64(ix.df[t])
			idf := math.Log(1 + (n-df+0.5)/(df+0.5))
			tf := float64(f)
			score += idf * tf * (k1 + 1) / (tf + k1*(1-b+b*float64(ix.length[i])/ix.avgLen))
		}
		if score > 0 {
			// Rounded so that the order does not hang on the last bits.
			hits = append(hits, Hit{Name: name, Score: math.Round(score*1e6) / 1e6})
		}
	}
	sort.Slice(hits, func(i, j int) bool {
		if hits[i].Score != hits[j].Score {
			return hits[i].Score > hits[j].Score
		}
		return hits[i].Name < hits[j].Name
	})
	if len(hits) > limit {
		hits = hits[:limit]
	}
	return hits
}

// queryTerms are the distinct terms of a query, in first-seen order, bounded.
func queryTerms(q string) []string {
	if len(q) > MaxQueryBytes {
		q = cut(q, MaxQueryBytes)
	}
	var out []string
	seen := map[string]bool{}
	for _, t := range Tokens(q) {
		if seen[t] {
			continue
		}
		seen[t] = true
		out = append(out, t)
		if len(out) == MaxQueryTerms {
			break
		}
	}
	return out
}

// cut shortens s to at most n bytes at a rune boundary.
func cut(s string, n int) string {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Tokens splits text into search terms: words split at every character
// that is not a letter or digit, at lower-to-upper case changes
// (getCardTxn: get, card, txn), before the last capital of a run of
// capitals followed by lower case (HTTPServer: http, server) and between
// letters and digits; lower-cased, stop words dropped, and endings folded
// (Stem).
func Tokens(text string) []string {
	var out []string
	rs := []rune(text)
	start := -1
	flush := func(end int) {
		if start < 0 {
			return
		}
		w := strings.ToLower(string(rs[start:end]))
		start = -1
		if stop[w] {
			return
		}
		out = append(out, Stem(w))
	}
	for i, r := range rs {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			flush(i)
			continue
		}
		if start >= 0 {
			p := rs[i-1]
			switch {
			case unicode.IsLower(p) && unicode.IsUpper(r),
				unicode.IsLetter(p) != unicode.IsLetter(r),
				unicode.IsUpper(p) && unicode.IsUpper(r) && i+1 < len(rs) && unicode.IsLower(rs[i+1]):
				flush(i)
			}
		}
		if start < 0 {
			start = i
		}
	}
	flush(len(rs))
	return out
}

// Stem folds common English endings so that "refunds", "refunded" and
// "refunding" meet "refund", and "create", "created" and "creating" meet
// "creat": -ies to -y, -es after s, x, z, ch and sh, a plain -s (not -ss,
// -us, -is), -ing and -ed when at least three letters remain (with a
// doubled final consonant undone), then a final -e.
func Stem(w string) string {
	n := len(w)
	switch {
	case n > 4 && strings.HasSuffix(w, "ies"):
		w = w[:n-3] + "y"
	case n > 4 && (strings.HasSuffix(w, "ches") || strings.HasSuffix(w, "shes") || strings.HasSuffix(w, "sses") ||
		strings.HasSuffix(w, "xes") || strings.HasSuffix(w, "zes")):
		w = w[:n-2]
	case n > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is"):
		w = w[:n-1]
	case n > 5 && strings.HasSuffix(w, "ing"):
		w = undouble(w[:n-3])
	case n > 4 && strings.HasSuffix(w, "ed"):
		w = undouble(w[:n-2])
	}
	if len(w) > 3 && strings.HasSuffix(w, "e") {
		w = w[:len(w)-1]
	}
	return w
}

func undouble(w string) string {
	n := len(w)
	if n >= 4 && w[n-1] == w[n-2] && !strings.ContainsRune("aeioulsz", rune(w[n-1])) {
		return w[:n-1]
	}
	return w
}

var stop = map[string]bool{
	"a": true, "an": true, "the": true, "of": true, "to": true, "for": true, "and": true, "or": true,
	"in": true, "on": true, "by": true, "with": true, "is": true, "it": true, "its": true, "this": true,
	"that": true, "from": true, "as": true, "be": true, "at": true, "are": true, "i": true, "me": true,
	"my": true, "we": true, "our": true, "you": true, "your": true, "can": true, "please": true,
	"into": true, "one": true, "all": true, "any": true, "which": true, "what": true, "how": true,
}

// Name is the built-in tool the loop offers an agent granted a connector
// with search: no other tool may take it.
const Name = "search_tools"

// Def is search_tools as the model is offered it. It is the same for
// every run, so it belongs to the cached prompt prefix.
func Def() model.ToolDef {
	return model.ToolDef{
		Name: Name,
		Description: "Find more tools. Say in a few words what you need to do (for example \"refund a card transaction\"). " +
			"The best matching tools you may use are added to your tools for the rest of the run, and their names are returned; " +
			"call them as usual.",
		InputSchema: json.RawMessage(`{"additionalProperties":false,"properties":{"limit":{"description":"How many tools to add, 1 to 10 (default 5).","maximum":10,"minimum":1,"type":"integer"},"query":{"description":"What you need to do, in plain words.","maxLength":512,"minLength":1,"type":"string"}},"required":["query"],"type":"object"}`),
	}
}

// Args are search_tools' arguments.
type Args struct {
	Query string `json:"query"`
	Limit int    `json:"limit,omitempty"`
}

// ParseArgs reads search_tools' arguments, refusing what the model must
// correct: not an object, an unknown field, no query, a limit out of range.
func ParseArgs(raw json.RawMessage) (Args, error) {
	var a Args
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil || dec.More() {
		return a, errors.New(`search_tools takes {"query": "what you need to do", "limit": 5}`)
	}
	switch {
	case strings.TrimSpace(a.Query) == "":
		return a, errors.New("query must say what you need to do")
	case len(a.Query) > MaxQueryBytes || !utf8.ValidString(a.Query):
		return a, fmt.Errorf("query must be UTF-8 text of at most %d bytes", MaxQueryBytes)
	case a.Limit < 0 || a.Limit > MaxLimit:
		return a, fmt.Errorf("limit must be from 1 to %d", MaxLimit)
	}
	if a.Limit == 0 {
		a.Limit = DefaultLimit
	}
	return a, nil
}
