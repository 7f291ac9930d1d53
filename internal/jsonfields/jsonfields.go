// Package jsonfields decodes chosen members of a JSON object without
// decoding the rest. Decode validates the whole document in one pass that
// skips the inside of strings a byte at a time without encoding/json's
// per-byte state machine, then hands only the members asked for to
// encoding/json. It is for hot paths that read a few fields of large
// event payloads (the prompt-hash index, the run metrics), where
// json.Unmarshal into a narrow struct still scans every byte twice.
//
// Its result is, by construction and by FuzzDecode, that of json.Unmarshal
// into a struct holding only the fields asked for: the same documents are
// refused, members are matched to fields as encoding/json matches them
// (the exact name, else the name without regard to case, Unicode folds
// included), a later duplicate member overwrites an earlier one, and a
// value of the wrong type is an error after every other field is decoded.
package jsonfields

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Field names one member to decode and where to put it.
type Field struct {
	// Name is the member's name as a struct tag would give it. The names
	// of one Decode call must differ from each other without regard to
	// case.
	Name string
	// Into is a pointer json.Unmarshal accepts, or a *Raw.
	Into any
}

// Raw receives a member's value undecoded: a slice of the document
// (valid JSON, not copied), as json.RawMessage would hold it.
type Raw []byte

// maxDepth is encoding/json's nesting limit: deeper documents are invalid.
const maxDepth = 10000

// SyntaxError is a document that is not valid JSON.
type SyntaxError struct {
	Offset int
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("jsonfields: invalid JSON at byte %d", e.Offset)
}

// ErrNotObject is returned for a valid document that is neither an
// object nor null (json.Unmarshal into a struct refuses it too).
var ErrNotObject = errors.New("jsonfields: the JSON value is not an object")

// hit is a member of the top-level object that a field names.
type hit struct {
	field int
	value []byte
}

// Decode decodes the members of the object in data that fields name into
// their targets, in the order the document holds them; members no field
// names are skipped without decoding. A document that is null decodes
// nothing. An error means data is not valid JSON (*SyntaxError, nothing
// decoded), is not an object (ErrNotObject), or holds a value its field's
// type cannot take (the first such error, every other field decoded).
func Decode(data []byte, fields ...Field) error {
	p := parser{data: data, fields: fields}
	if err := p.scan(); err != nil {
		return err
	}
	var first error
	for i := range p.nhits + len(p.extra) {
		h := p.hit(i)
		f := &fields[h.field]
		if fast(f.Into, h.value) {
			continue
		}
		if err := json.Unmarshal(h.value, f.Into); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// fast decodes the commonest values without encoding/json, as it would
// decode them; false leaves the value to it.
func fast(into any, v []byte) bool {
	switch t := into.(type) {
	case *Raw:
		*t = v
		return true
	case *string:
		if len(v) >= 2 && v[0] == '"' && plain(v[1:len(v)-1]) {
			*t = string(v[1 : len(v)-1])
			return true
		}
	case *bool:
		switch string(v) {
		case "true":
			*t = true
			return true
		case "false":
			*t = false
			return true
		}
	case *int64:
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			*t = n
			return true
		}
	case *int:
		if n, err := strconv.ParseInt(string(v), 10, strconv.IntSize); err == nil {
			*t = int(n)
			return true
		}
	}
	return false
}

// match returns the index of the field a member named quoted (the raw
// JSON string) fills: the one named exactly so, else one equal to it
// without regard to case; -1 for none.
func match(fields []Field, quoted []byte) int {
	name := quoted[1 : len(quoted)-1]
	if !plain(name) {
		// Escapes or non-ASCII bytes: encoding/json's own unquoting
		// (escapes resolved, invalid UTF-8 replaced).
		var s string
		if json.Unmarshal(quoted, &s) != nil {
			return -1 // cannot happen: the string was validated
		}
		name = []byte(s)
	}
	for i := range fields {
		if string(name) == fields[i].Name {
			return i
		}
	}
	for i := range fields {
		if bytes.EqualFold(name, []byte(fields[i].Name)) {
			return i
		}
	}
	return -1
}

// plain reports whether s, the inside of a valid JSON string, is its own
// value: no escapes and ASCII only.
func plain(s []byte) bool {
	for _, c := range s {
		if c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}

// scan validates the document and collects the hits of its top-level
// object (none for null).
func (p *parser) scan() error {
	data := p.data
	i := p.space(0)
	top := i < len(data) && data[i] == '{'
	var end int
	var ok bool
	if top {
		end, ok = p.object(i, 1, true)
	} else {
		end, ok = p.value(i, 0)
	}
	if !ok {
		return &SyntaxError{Offset: p.bad}
	}
	if j := p.space(end); j != len(data) {
		return &SyntaxError{Offset: j}
	}
	if !top && string(data[i:end]) != "null" {
		return ErrNotObject
	}
	return nil
}

// parser validates JSON as encoding/json's scanner does. Each method
// takes the offset where its value starts and returns the offset after
// it; ok false records the offending offset in bad.
type parser struct {
	data   []byte
	bad    int
	fields []Field
	// The top-level object's hits, in order: the first few in place (no
	// allocation), the rest in extra.
	nhits int
	hits  [8]hit
	extra []hit
}

func (p *parser) addHit(h hit) {
	if p.nhits < len(p.hits) {
		p.hits[p.nhits] = h
		p.nhits++
		return
	}
	p.extra = append(p.extra, h)
}

func (p *parser) hit(i int) hit {
	if i < p.nhits {
		return p.hits[i]
	}
	return p.extra[i-p.nhits]
}

func (p *parser) fail(i int) (int, bool) {
	p.bad = i
	return i, false
}

func (p *parser) space(i int) int {
	for i < len(p.data) {
		switch p.data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func (p *parser) value(i, depth int) (int, bool) {
	if i >= len(p.data) {
		return p.fail(i)
	}
	switch c := p.data[i]; {
	case c == '"':
		return p.str(i)
	case c == '{':
		return p.object(i, depth+1, false)
	case c == '[':
		return p.array(i, depth+1)
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number(i)
	case c == 't':
		return p.literal(i, "true")
	case c == 'f':
		return p.literal(i, "false")
	case c == 'n':
		return p.literal(i, "null")
	}
	return p.fail(i)
}

func (p *parser) literal(i int, lit string) (int, bool) {
	if !bytes.HasPrefix(p.data[i:], []byte(lit)) {
		return p.fail(i)
	}
	return i + len(lit), true
}

// object validates the object at i; with top set, it collects the hits
// of its members.
func (p *parser) object(i, depth int, top bool) (int, bool) {
	if depth > maxDepth {
		return p.fail(i)
	}
	i = p.space(i + 1)
	if i < len(p.data) && p.data[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(p.data) || p.data[i] != '"' {
			return p.fail(i)
		}
		nameEnd, ok := p.str(i)
		if !ok {
			return nameEnd, false
		}
		j := p.space(nameEnd)
		if j >= len(p.data) || p.data[j] != ':' {
			return p.fail(j)
		}
		vi := p.space(j + 1)
		ve, ok := p.value(vi, depth)
		if !ok {
			return ve, false
		}
		if top {
			if f := match(p.fields, p.data[i:nameEnd]); f >= 0 {
				p.addHit(hit{field: f, value: p.data[vi:ve]})
			}
		}
		var done bool
		if i, done, ok = p.after(ve, '}'); !ok || done {
			return i, ok
		}
	}
}

// after reads what follows a member or an element that ends at i: a comma
// (the offset of the next one) or close (done, the offset after it).
func (p *parser) after(i int, close byte) (next int, done, ok bool) {
	i = p.space(i)
	if i < len(p.data) {
		switch p.data[i] {
		case ',':
			return p.space(i + 1), false, true
		case close:
			return i + 1, true, true
		}
	}
	next, _ = p.fail(i)
	return next, false, false
}

func (p *parser) array(i, depth int) (int, bool) {
	if depth > maxDepth {
		return p.fail(i)
	}
	i = p.space(i + 1)
	if i < len(p.data) && p.data[i] == ']' {
		return i + 1, true
	}
	for {
		e, ok := p.value(i, depth)
		if !ok {
			return e, false
		}
		var done bool
		if i, done, ok = p.after(e, ']'); !ok || done {
			return i, ok
		}
	}
}

// str validates the string whose opening quote is at i: any byte from
// 0x20 up but the quote and the backslash stands for itself, as
// encoding/json's scanner accepts (invalid UTF-8 included).
func (p *parser) str(i int) (int, bool) {
	d := p.data
	for j := i + 1; j < len(d); j++ {
		for j < len(d) && plainByte[d[j]] {
			j++
		}
		if j == len(d) {
			break
		}
		switch c := d[j]; {
		case c == '"':
			return j + 1, true
		case c < 0x20:
			return p.fail(j)
		case c == '\\':
			j++
			if j >= len(d) {
				return p.fail(j)
			}
			switch d[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(d) {
					return p.fail(len(d))
				}
				for k := j + 1; k <= j+4; k++ {
					if !isHex(d[k]) {
						return p.fail(k)
					}
				}
				j += 4
			default:
				return p.fail(j)
			}
		}
	}
	return p.fail(len(d))
}

// plainByte is set for the bytes that stand for themselves in a string.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// number validates -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at i.
func (p *parser) number(i int) (int, bool) {
	d := p.data
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		i = digits(d, i)
	default:
		return p.fail(i)
	}
	if i < len(d) && d[i] == '.' {
		if i+1 >= len(d) || !isDigit(d[i+1]) {
			return p.fail(i + 1)
		}
		i = digits(d, i+1)
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			return p.fail(i)
		}
		i = digits(d, i)
	}
	return i, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func digits(d []byte, i int) int {
	for i < len(d) && isDigit(d[i]) {
		i++
	}
	return i
}
