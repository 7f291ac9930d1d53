// Package jsoncanon produces a canonical JSON encoding (object keys sorted,
// no insignificant whitespace, numbers in their shortest form) so that two
// equal JSON values always hash the same. It is used for idempotency keys,
// loop detection and approval binding.
package jsoncanon

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
)

// MaxDepth bounds nesting so hostile input cannot exhaust the stack.
const MaxDepth = 64

// Canonicalize re-encodes the JSON value in data canonically. It fails on
// invalid JSON, trailing data, or nesting deeper than MaxDepth.
func Canonicalize(data []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if dec.More() {
		return nil, errors.New("invalid JSON: trailing data")
	}
	var buf bytes.Buffer
	if err := write(&buf, v, 0); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Marshal encodes v as canonical JSON.
func Marshal(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return Canonicalize(raw)
}

// Hash returns the sha256 of the canonical form of data.
func Hash(data []byte) ([32]byte, error) {
	c, err := Canonicalize(data)
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(c), nil
}

func write(buf *bytes.Buffer, v any, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("invalid JSON: nesting deeper than %d", MaxDepth)
	}
	switch x := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		if x {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case json.Number:
		buf.WriteString(canonNumber(x))
	case string:
		writeString(buf, x)
	case []any:
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := write(buf, e, depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k)
			buf.WriteByte(':')
			if err := write(buf, x[k], depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	default:
		return fmt.Errorf("jsoncanon: unexpected type %T", v)
	}
	return nil
}

// writeString writes s as json.Marshal encodes it. Printable ASCII that
// json.Marshal leaves alone (all but the quote, the backslash and the
// HTML-escaped < > &) is written as it is, without encoding/json; any
// other string goes through it.
func writeString(buf *bytes.Buffer, s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			buf.Write(b)
			return
		}
	}
	buf.WriteByte('"')
	buf.WriteString(s)
	buf.WriteByte('"')
}

// canonNumber renders integers exactly and other numbers in the shortest
// float64 form, so 1.0, 1 and 1e0 are equal.
func canonNumber(n json.Number) string {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return strconv.FormatInt(i, 10)
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return string(n)
	}
	if f == float64(int64(f)) && f >= -1e15 && f <= 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
